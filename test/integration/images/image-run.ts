/**
 * Runs an image's program the way a container runtime would, without one: the layer
 * extracted, then the image's own Entrypoint, Env, WorkingDir and User applied on that root
 * mounted read-only, with /proc, a fresh tmpfs on /tmp (the chart's emptyDir) and on any other
 * volume asked for. The mounts live in a private mount namespace and go with the process.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readImage, type ReadImage } from '../../../scripts/images/oci.ts';

export interface ExtractedImage {
  archive: ReadImage;
  rootfs: string;
  /** `tar -tv` of the layer: path (no leading slash, dirs end in /), mode string, uid/gid. */
  listing: Array<{ path: string; mode: string; owner: string }>;
}

/** Reads an archive (every digest checked) and extracts its layer with the system's tar. */
export function extractImage(archivePath: string, into: string): ExtractedImage {
  const archive = readImage(archivePath);
  mkdirSync(into, { recursive: true });
  const layer = `${into}.layer.tar.gz`;
  writeFileSync(layer, archive.layer);
  const rootfs = join(into, 'rootfs');
  mkdirSync(rootfs);
  execFileSync('tar', ['-xzf', layer, '-C', rootfs, '--numeric-owner']);
  const listing = execFileSync('tar', ['-tvzf', layer, '--numeric-owner'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
    .trim().split('\n').map((line) => {
      const [mode = '', owner = '', , , , ...rest] = line.split(/\s+/);
      return { mode, owner, path: rest.join(' ').replace(/ -> .*$/, '') };
    });
  return { archive, rootfs, listing };
}

export interface RunOptions {
  /** Replaces the image's Cmd (the Kubernetes `args`). */
  args?: string[];
  /** Replaces the image's Entrypoint (the Kubernetes `command`). */
  command?: string[];
  /** Added to the image's Env. */
  env?: Record<string, string>;
  /** Folders (besides /tmp) that get a tmpfs owned by the image's user, like an emptyDir with fsGroup. */
  volumes?: string[];
  /** Host folders copied into the tmpfs of /tmp before the program starts, as [source, name]. */
  tmpFiles?: Array<[string, string]>;
}

function script(uid: string, gid: string, workingDir: string, options: RunOptions): string {
  return [
    'set -e',
    'root=$1; shift',
    // The runtime makes the mount points it needs, as runc does for /proc.
    'mkdir -p "$root/proc"',
    'mount --bind "$root" "$root"',
    'mount -o remount,bind,ro "$root"',
    'mount -t proc proc "$root/proc"',
    'mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"',
    ...(options.volumes ?? []).map((v) => `mount -t tmpfs -o mode=0770,uid=${uid},gid=${gid} tmpfs "$root${v}"`),
    ...(options.tmpFiles ?? []).map(([source, name]) => `cp -r '${source}' "$root/tmp/${name}"`),
    `exec unshare --root="$root" --wd='${workingDir}' --setuid ${uid} --setgid ${gid} "$@"`,
  ].join('\n');
}

/** Starts the image's program; the returned process is the program itself once it runs. */
export function runImage(image: ExtractedImage, options: RunOptions = {}): ChildProcess {
  const config = image.archive.config.config as { User: string; Entrypoint: string[] | null; Cmd: string[] | null; Env: string[]; WorkingDir: string };
  const [uid = '0', gid = uid] = config.User.split(':');
  const argv = [...(options.command ?? config.Entrypoint ?? []), ...(options.args ?? config.Cmd ?? [])];
  const env = Object.fromEntries(config.Env.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]));
  return spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script(uid, gid, config.WorkingDir || '/', options), 'sh', image.rootfs, ...argv], {
    env: { ...env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Runs the image's program to its end: exit code and output. */
export function runImageToEnd(image: ExtractedImage, options: RunOptions = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = runImage(image, options);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}
