/**
 * Single-layer OCI image archives (oci-layout, index.json, blobs) that `ctr images import`
 * and `docker load` accept, written with no Docker and no registry. Entries are sorted and
 * carry mtime 0, so the same inputs give the same digests.
 */
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

export type LayerEntry =
  | { type: 'dir'; path: string; mode: number; uid?: number; gid?: number }
  | { type: 'file'; path: string; mode: number; data: Buffer; uid?: number; gid?: number }
  | { type: 'symlink'; path: string; target: string };

export interface ImageConfig {
  /** Full reference, e.g. docker.io/library/gw-sidecar:0.1.0, as a runtime resolves it. */
  name: string;
  user: string;
  entrypoint?: string[];
  cmd?: string[];
  env: string[];
  workingDir: string;
  exposedPorts?: number[];
}

export interface WrittenImage {
  name: string;
  path: string;
  manifestDigest: string;
  bytes: number;
}

const BLOCK = 512;

function octal(value: number, width: number): string {
  return `${value.toString(8).padStart(width - 1, '0')}\0`;
}

function paxRecord(key: string, value: string): string {
  // The length prefix counts itself, so find the fixed point.
  const body = ` ${key}=${value}\n`;
  let length = Buffer.byteLength(body) + 1;
  while (`${length}${body}`.length !== length) length = Buffer.byteLength(`${length}${body}`);
  return `${length}${body}`;
}

interface Header {
  name: string;
  size: number;
  mode: number;
  typeflag: '0' | '2' | '5' | 'x';
  linkname?: string;
  uid?: number;
  gid?: number;
}

function header({ name, size, mode, typeflag, linkname = '', uid = 0, gid = 0 }: Header): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, 'utf8');
  h.write(octal(mode & 0o7777, 8), 100, 'ascii');
  h.write(octal(uid, 8), 108, 'ascii');
  h.write(octal(gid, 8), 116, 'ascii');
  h.write(octal(size, 12), 124, 'ascii');
  h.write(octal(0, 12), 136, 'ascii');
  h.write('        ', 148, 'ascii');
  h.write(typeflag, 156, 'ascii');
  h.write(linkname, 157, 100, 'utf8');
  h.write('ustar\u000000', 257, 'binary');
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'ascii');
  return h;
}

function padded(data: Buffer): Buffer[] {
  const rest = data.length % BLOCK;
  return rest === 0 ? [data] : [data, Buffer.alloc(BLOCK - rest)];
}

/** A POSIX tar of the entries; names or link targets past ustar's 100 bytes go in PAX headers. */
export function tarLayer(entries: LayerEntry[]): Buffer {
  const parts: Buffer[] = [];
  const sorted = [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  for (const entry of sorted) {
    const name = entry.path.replace(/^\/+/, '') + (entry.type === 'dir' ? '/' : '');
    const link = entry.type === 'symlink' ? entry.target : '';
    if (Buffer.byteLength(name) > 99 || Buffer.byteLength(link) > 99) {
      const pax = Buffer.from(paxRecord('path', name) + (link ? paxRecord('linkpath', link) : ''));
      parts.push(header({ name: 'PaxHeader', size: pax.length, mode: 0o644, typeflag: 'x' }), ...padded(pax));
    }
    const short = name.slice(0, 99);
    if (entry.type === 'dir') parts.push(header({ name: short, size: 0, mode: entry.mode, typeflag: '5', uid: entry.uid, gid: entry.gid }));
    else if (entry.type === 'symlink') parts.push(header({ name: short, size: 0, mode: 0o777, typeflag: '2', linkname: link.slice(0, 99) }));
    else parts.push(header({ name: short, size: entry.data.length, mode: entry.mode, typeflag: '0', uid: entry.uid, gid: entry.gid }), ...padded(entry.data));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}

const sha256 = (data: Buffer): string => `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** Writes the archive of one image whose filesystem is `entries`. */
export function writeImage(path: string, config: ImageConfig, entries: LayerEntry[]): WrittenImage {
  const layer = tarLayer(entries);
  const layerGz = gzipSync(layer, { level: 6 });
  const imageConfig = Buffer.from(JSON.stringify({
    architecture: 'amd64',
    os: 'linux',
    created: '1970-01-01T00:00:00Z',
    config: {
      User: config.user,
      Env: config.env,
      Entrypoint: config.entrypoint ?? null,
      Cmd: config.cmd ?? null,
      WorkingDir: config.workingDir,
      ExposedPorts: Object.fromEntries((config.exposedPorts ?? []).map((p) => [`${p}/tcp`, {}])),
    },
    rootfs: { type: 'layers', diff_ids: [sha256(layer)] },
  }));
  const manifest = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(imageConfig), size: imageConfig.length },
    layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: sha256(layerGz), size: layerGz.length }],
  }));
  const tag = config.name.slice(config.name.lastIndexOf(':') + 1);
  const index = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    manifests: [{
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      digest: sha256(manifest),
      size: manifest.length,
      annotations: { 'io.containerd.image.name': config.name, 'org.opencontainers.image.ref.name': tag },
      platform: { architecture: 'amd64', os: 'linux' },
    }],
  }));
  const blob = (data: Buffer): LayerEntry => ({ type: 'file', path: `blobs/sha256/${sha256(data).slice(7)}`, mode: 0o644, data });
  const archive = tarLayer([
    { type: 'dir', path: 'blobs', mode: 0o755 },
    { type: 'dir', path: 'blobs/sha256', mode: 0o755 },
    { type: 'file', path: 'oci-layout', mode: 0o644, data: Buffer.from('{"imageLayoutVersion":"1.0.0"}') },
    { type: 'file', path: 'index.json', mode: 0o644, data: index },
    blob(imageConfig),
    blob(manifest),
    blob(layerGz),
  ]);
  writeFileSync(path, archive);
  return { name: config.name, path, manifestDigest: sha256(manifest), bytes: archive.length };
}

/** Reads back an archive's index, manifest, config and layer (for tests and checks). */
export function readImage(path: string): { index: unknown; manifest: { layers: Array<{ digest: string }>; config: { digest: string } }; config: { config: Record<string, unknown> }; layer: Buffer } {
  const files = new Map<string, Buffer>();
  const tar = readFileSync(path);
  for (let at = 0; at + BLOCK <= tar.length;) {
    const h = tar.subarray(at, at + BLOCK);
    if (h.every((b) => b === 0)) break;
    const name = h.subarray(0, 100).toString('utf8').replace(/\0.*$/s, '');
    const size = parseInt(h.subarray(124, 136).toString('ascii').replace(/\0.*$/s, '').trim() || '0', 8);
    files.set(name, tar.subarray(at + BLOCK, at + BLOCK + size));
    at += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
  }
  const blob = (digest: string): Buffer => {
    const data = files.get(`blobs/sha256/${digest.slice(7)}`);
    if (!data) throw new Error(`${path}: blob ${digest} missing`);
    return data;
  };
  const index = JSON.parse((files.get('index.json') ?? Buffer.from('{}')).toString()) as { manifests: Array<{ digest: string }> };
  const manifest = JSON.parse(blob(index.manifests[0]?.digest ?? '').toString()) as { layers: Array<{ digest: string }>; config: { digest: string } };
  const config = JSON.parse(blob(manifest.config.digest).toString()) as { config: Record<string, unknown> };
  return { index, manifest, config, layer: blob(manifest.layers[0]?.digest ?? '') };
}
