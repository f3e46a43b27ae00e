/**
 * Single-layer OCI image archives (oci-layout, index.json, blobs) that `ctr images import`
 * and `docker load` accept, written with no Docker and no registry. Entries are sorted and
 * carry mtime 0, so the same inputs give the same digests, and an archive that already
 * holds the image is not written again.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { partialPath, publish } from './cache.ts';

export type LayerEntry =
  | { type: 'dir'; path: string; mode: number; uid?: number; gid?: number }
  | { type: 'file'; path: string; mode: number; data: Buffer; uid?: number; gid?: number }
  | { type: 'symlink'; path: string; target: string };

export interface ImageConfig {
  /** The image's name, e.g. gw-sidecar:0.1.0; archives carry its full reference. */
  name: string;
  user: string;
  entrypoint?: string[];
  cmd?: string[];
  env: string[];
  workingDir: string;
  exposedPorts?: number[];
}

export interface WrittenImage {
  /** The full reference the archive carries, as `ctr images ls` shows it after import. */
  name: string;
  path: string;
  manifestDigest: string;
  bytes: number;
  /** The archive was already up to date and was left as it was. */
  reused: boolean;
}

const BLOCK = 512;
const MANIFEST_TYPE = 'application/vnd.oci.image.manifest.v1+json';
const CONFIG_TYPE = 'application/vnd.oci.image.config.v1+json';
const LAYER_TYPE = 'application/vnd.oci.image.layer.v1.tar+gzip';
const NAME_ANNOTATION = 'io.containerd.image.name';

function octal(value: number, width: number): string {
  return `${value.toString(8).padStart(width - 1, '0')}\0`;
}

function paxRecord(key: string, value: string): string {
  // The length prefix counts itself, so find the fixed point.
  const body = ` ${key}=${value}\n`;
  let length = Buffer.byteLength(body) + 1;
  while (Buffer.byteLength(`${length}${body}`) !== length) length = Buffer.byteLength(`${length}${body}`);
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

/**
 * The reference a CRI runtime resolves a pod's `image:` to, which is the name the archive
 * must carry: `gw-sidecar:0.1.0` is docker.io/library/gw-sidecar:0.1.0, `localhost/pause:1`
 * stays as it is; no tag means `latest`.
 */
export function fullReference(name: string): string {
  const [first = '', ...rest] = name.split('/');
  const hasDomain = rest.length > 0 && (first.includes('.') || first.includes(':') || first === 'localhost');
  const path = hasDomain ? name : `docker.io/${rest.length === 0 ? 'library/' : ''}${name}`;
  return path.slice(path.lastIndexOf('/') + 1).includes(':') ? path : `${path}:latest`;
}

function configBlob(config: ImageConfig, diffId: string): Buffer {
  return Buffer.from(JSON.stringify({
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
    rootfs: { type: 'layers', diff_ids: [diffId] },
  }));
}

/**
 * The archive already at `path` when it holds this very image: the config names the
 * uncompressed layer's digest, so an equal config and name mean equal content, and the
 * costly compression is skipped.
 */
function upToDate(path: string, name: string, imageConfig: Buffer): WrittenImage | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const image = readImage(path);
    if (image.name !== name || !image.configBlob.equals(imageConfig)) return undefined;
    return { name, path, manifestDigest: image.manifestDigest, bytes: statSync(path).size, reused: true };
  } catch {
    return undefined;
  }
}

/**
 * Writes the archive of one image whose filesystem is `entries` (`config.name` taken as a
 * full reference), unless the archive at `path` already holds it.
 */
export function writeImage(path: string, config: ImageConfig, entries: LayerEntry[]): WrittenImage {
  const name = fullReference(config.name);
  const layer = tarLayer(entries);
  const imageConfig = configBlob(config, sha256(layer));
  const existing = upToDate(path, name, imageConfig);
  if (existing) return existing;
  const layerGz = gzipSync(layer, { level: 6 });
  const manifest = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: MANIFEST_TYPE,
    config: { mediaType: CONFIG_TYPE, digest: sha256(imageConfig), size: imageConfig.length },
    layers: [{ mediaType: LAYER_TYPE, digest: sha256(layerGz), size: layerGz.length }],
  }));
  const index = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    manifests: [{
      mediaType: MANIFEST_TYPE,
      digest: sha256(manifest),
      size: manifest.length,
      annotations: { [NAME_ANNOTATION]: name, 'org.opencontainers.image.ref.name': name.slice(name.lastIndexOf(':') + 1) },
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
  // A run stopped halfway, or one running at the same time, never leaves a half archive.
  writeFileSync(partialPath(path), archive);
  publish(partialPath(path), path);
  return { name, path, manifestDigest: sha256(manifest), bytes: archive.length, reused: false };
}

export interface ReadImage {
  /** The `io.containerd.image.name` the archive carries. */
  name: string;
  manifestDigest: string;
  index: { schemaVersion: number; manifests: Array<{ mediaType: string; digest: string; size: number; annotations?: Record<string, string> }> };
  manifest: { schemaVersion: number; mediaType: string; config: { mediaType: string; digest: string; size: number }; layers: Array<{ mediaType: string; digest: string; size: number }> };
  config: { architecture: string; os: string; config: Record<string, unknown>; rootfs: { type: string; diff_ids: string[] } };
  configBlob: Buffer;
  /** The compressed layer. */
  layer: Buffer;
}

/** The entries of a tar whose names fit its headers (an archive of ours: blobs and two files). */
function tarFiles(tar: Buffer): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (let at = 0; at + BLOCK <= tar.length;) {
    const h = tar.subarray(at, at + BLOCK);
    if (h.every((b) => b === 0)) break;
    const name = h.subarray(0, 100).toString('utf8').replace(/\0.*$/s, '');
    const size = parseInt(h.subarray(124, 136).toString('ascii').replace(/\0.*$/s, '').trim() || '0', 8);
    files.set(name, tar.subarray(at + BLOCK, at + BLOCK + size));
    at += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
  }
  return files;
}

/** Reads back an archive's first image, checking every blob against its digest and size. */
export function readImage(path: string): ReadImage {
  const files = tarFiles(readFileSync(path));
  const blob = (ref: { digest: string; size: number } | undefined): Buffer => {
    const data = ref && files.get(`blobs/sha256/${ref.digest.replace(/^sha256:/, '')}`);
    if (!ref || !data) throw new Error(`${path}: blob ${ref?.digest ?? '(none)'} missing`);
    if (data.length !== ref.size || sha256(data) !== ref.digest) throw new Error(`${path}: blob ${ref.digest} does not match its digest or size`);
    return data;
  };
  if (files.get('oci-layout')?.toString() !== '{"imageLayoutVersion":"1.0.0"}') throw new Error(`${path}: no oci-layout file`);
  const index = JSON.parse(files.get('index.json')?.toString() ?? '{}') as ReadImage['index'];
  const entry = index.manifests?.[0];
  const manifest = JSON.parse(blob(entry).toString()) as ReadImage['manifest'];
  const configBlob = blob(manifest.config);
  return {
    name: entry?.annotations?.[NAME_ANNOTATION] ?? '',
    manifestDigest: entry?.digest ?? '',
    index,
    manifest,
    config: JSON.parse(configBlob.toString()) as ReadImage['config'],
    configBlob,
    layer: blob(manifest.layers[0]),
  };
}
