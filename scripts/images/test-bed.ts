/**
 * The images a test node needs besides gw's own, as OCI archives like those of
 * `npm run images`: the pod sandbox (pause), a tools image for client pods (Debian's
 * busybox-static: sh, wget, nc, nslookup, sleep …), and any binary on its own (CoreDNS).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { partialPath, publish } from './cache.ts';
import { fullReference, writeImage, type WrittenImage } from './oci.ts';
import { ImageBuildError, requireHostFile, Rootfs } from './rootfs.ts';

/** Default names; a containerd config names the pause image as its sandbox_image. */
export const PAUSE_IMAGE = 'localhost/pause:gw';
export const TOOLS_IMAGE = 'localhost/gw-tools:busybox';

const PAUSE_SOURCE = join(import.meta.dirname, 'pause.c');
const BUSYBOX = '/bin/busybox';
const NONROOT = 65532;

export interface BinaryImageOptions {
  /** Folder of the archive, named after the image: `localhost/coredns:1.12.0` → `coredns-1.12.0.tar`. */
  out: string;
  entrypoint: string[];
  cmd?: string[];
  /** Numeric `uid:gid`, so Kubernetes can check runAsNonRoot; default 65532:65532. */
  user?: string;
  /** Where the binary goes in the image; default `/<file name>`. */
  as?: string;
  /** Added to a PATH that covers /, /bin and /usr/bin. */
  env?: string[];
  workingDir?: string;
  ports?: number[];
}

/** The archive file of an image in `out`: its last path segment, tag after a dash. */
export function archivePath(out: string, name: string): string {
  const reference = fullReference(name);
  return join(out, `${reference.slice(reference.lastIndexOf('/') + 1).replace(':', '-')}.tar`);
}

/** The uid of a numeric `uid:gid`. */
function numericUid(user: string): number {
  const match = /^(\d+):\d+$/.exec(user);
  if (!match) throw new ImageBuildError('image-user', `user must be numeric uid:gid, got '${user}'`);
  return Number(match[1]);
}

/** An image's base: the user in /etc/passwd and /etc/group, and a /tmp anyone may write. */
function baseRootfs(user: string): Rootfs {
  const uid = numericUid(user);
  const fs = new Rootfs();
  fs.users(uid === 0 ? [['root', 0]] : [['root', 0], [uid === NONROOT ? 'nonroot' : `user${uid}`, uid]]);
  fs.dir('/tmp', 0o1777);
  return fs;
}

function writeFrom(fs: Rootfs, name: string, options: Omit<BinaryImageOptions, 'entrypoint'> & { entrypoint?: string[] }): WrittenImage {
  mkdirSync(options.out, { recursive: true });
  return writeImage(archivePath(options.out, name), {
    name,
    user: options.user ?? `${NONROOT}:${NONROOT}`,
    entrypoint: options.entrypoint,
    cmd: options.cmd,
    env: ['PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:/', ...(options.env ?? [])],
    workingDir: options.workingDir ?? '/',
    exposedPorts: options.ports,
  }, fs.entries());
}

/**
 * An image of one binary (static, or with the shared libraries `ldd` names) and the user it
 * runs as; for example CoreDNS:
 * `buildImageFromBinary('localhost/coredns:1.12.0', bin, { out, entrypoint: ['/coredns'] })`.
 */
export function buildImageFromBinary(name: string, binaryPath: string, options: BinaryImageOptions): WrittenImage {
  const fs = baseRootfs(options.user ?? `${NONROOT}:${NONROOT}`);
  fs.binary(requireHostFile('find-binary', binaryPath, `the binary of ${name}`), options.as ?? `/${basename(binaryPath)}`);
  return writeFrom(fs, name, options);
}

/** The pod sandbox: pause.c built static (kept in `<out>/.cache` by its source's hash), as 65535. */
export function pauseImage(out: string, name = PAUSE_IMAGE): WrittenImage {
  const source = readFileSync(PAUSE_SOURCE);
  const cacheDir = join(out, '.cache');
  mkdirSync(cacheDir, { recursive: true });
  const binary = join(cacheDir, `pause-${createHash('sha256').update(source).digest('hex').slice(0, 16)}`);
  if (!existsSync(binary)) {
    try {
      execFileSync('gcc', ['-static', '-Os', '-s', '-o', partialPath(binary), PAUSE_SOURCE], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (err) {
      rmSync(partialPath(binary), { force: true });
      const failure = err as { code?: string; stderr?: Buffer };
      const detail = failure.code === 'ENOENT' ? "gcc is not installed (Debian's gcc and libc6-dev)" : failure.stderr?.toString().trim() || (err as Error).message;
      throw new ImageBuildError('build-pause', `gcc -static ${PAUSE_SOURCE}: ${detail}`);
    }
    publish(partialPath(binary), binary);
  }
  return buildImageFromBinary(name, binary, { out, entrypoint: ['/pause'], user: '65535:65535', as: '/pause' });
}

/**
 * Client pods' image: Debian's busybox-static with every applet linked where busybox puts
 * it (/bin/sh, /usr/bin/wget, /usr/bin/nc …), as 65532, `sh` by default.
 */
export function toolsImage(out: string, name = TOOLS_IMAGE): WrittenImage {
  requireHostFile('find-busybox', BUSYBOX, "Debian's busybox-static");
  const fs = baseRootfs(`${NONROOT}:${NONROOT}`);
  fs.hostFile(BUSYBOX, BUSYBOX, 0o755);
  const applets = execFileSync(BUSYBOX, ['--list-full'], { encoding: 'utf8' }).split('\n').filter((path) => path.includes('/'));
  for (const applet of applets) if (`/${applet}` !== BUSYBOX) fs.symlink(`/${applet}`, BUSYBOX);
  return writeFrom(fs, name, { out, cmd: ['sh'] });
}
