/**
 * Runs an image's program the way a container runtime would, without one: the layer
 * extracted, then the image's own Entrypoint, Env, WorkingDir and User applied on that root
 * mounted read-only, with /proc, a fresh tmpfs on /tmp (the chart's emptyDir) and on any other
 * volume asked for. The mounts live in a private mount namespace and go with the process.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readImage, type ReadImage } from '../../../scripts/images/oci.ts';
import { killGroup } from '../../harness/procs.ts';

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
  // A group of its own, so a program that hangs can be killed with everything it started.
  return spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script(uid, gid, config.WorkingDir || '/', options), 'sh', image.rootfs, ...argv], {
    env: { ...env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
}

const read = (path: string): string => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '?';
  }
};

/** The fields of a /proc stat file after the parenthesised name: state, ppid, pgrp, ... */
const statFields = (path: string): string[] => {
  const stat = read(path);
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
};

/**
 * What each process of a group and each of its threads is doing: state, the kernel function it
 * waits in and its system call (202 is futex), so a hang says where it hangs.
 */
function describeGroup(pgid: number): string {
  const lines: string[] = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    const [state, ppid, pgrp] = statFields(`/proc/${pid}/stat`);
    if (Number(pgrp) !== pgid) continue;
    lines.push(`pid ${pid} (ppid ${ppid}) ${state} ${read(`/proc/${pid}/cmdline`).replaceAll('\0', ' ').trim().slice(0, 200)}`);
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      // it ended meanwhile
    }
    for (const tid of tasks) {
      const task = `/proc/${pid}/task/${tid}`;
      lines.push(`  tid ${tid} ${read(`${task}/comm`)} ${statFields(`${task}/stat`)[0]} wchan=${read(`${task}/wchan`)} syscall=${read(`${task}/syscall`).split(' ')[0]}`);
      lines.push(...read(`${task}/stack`).split('\n').slice(0, 8).map((frame) => `      ${frame}`));
    }
  }
  return lines.join('\n');
}

/**
 * Runs the image's program to its end: exit code and output. A program still running after
 * `limitMs` is killed with everything it started, and the run fails with what each of its
 * processes was doing.
 */
export function runImageToEnd(image: ExtractedImage, options: RunOptions = {}, limitMs = 40_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = runImage(image, options);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  return new Promise((resolve, reject) => {
    let overran: string | undefined;
    const limit = setTimeout(() => {
      const pgid = child.pid as number;
      overran = `${[...(options.command ?? []), ...(options.args ?? [])].join(' ').slice(0, 200)}: still running after ${limitMs} ms\n${describeGroup(pgid)}`;
      killGroup(pgid, 'SIGKILL');
    }, limitMs);
    child.once('error', (error) => {
      clearTimeout(limit);
      reject(error);
    });
    child.once('close', (code) => {
      clearTimeout(limit);
      if (overran) reject(new Error(`${overran}\nstdout: ${stdout}\nstderr: ${stderr}`));
      else resolve({ code, stdout, stderr });
    });
  });
}
