/**
 * npm run images [-- [--out DIR] [--tag TAG] [operator|sidecar|redis ...]]
 *
 * Builds gw's images as OCI archives (DIR/gw-<image>-<tag>.tar, default dist/images and the
 * package version) for clusters without a registry or Docker: `ctr -n k8s.io images import`
 * on each node. The same images as the Dockerfile's targets: the sources listed in
 * scripts/images/contents.txt under /app, production node_modules as locked, Node 24 from
 * the `node` package with the shared libraries it links, openssl for the operator, user
 * 65532; the redis image is Debian's redis-server as user 999.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { writeImage, type ImageConfig, type LayerEntry, type WrittenImage } from './oci.ts';

export const ROOT = join(import.meta.dirname, '..', '..');
const CONTENTS = join(import.meta.dirname, 'contents.txt');

export type ProductImage = 'operator' | 'sidecar' | 'redis';
export const PRODUCT_IMAGES: ProductImage[] = ['operator', 'sidecar', 'redis'];

/** What the images run, as the Dockerfile states it; a unit test holds the two together. */
export const IMAGE_RUNTIME: Record<ProductImage, { user: string; entrypoint?: string[]; cmd?: string[]; workingDir: string; ports: number[] }> = {
  operator: { user: '65532:65532', entrypoint: ['node', 'operator/main.ts'], workingDir: '/app', ports: [8082, 9443] },
  sidecar: { user: '65532:65532', entrypoint: ['node', 'sidecar/main.ts'], workingDir: '/app', ports: [8080, 8081, 8082] },
  redis: { user: '999:999', cmd: ['redis-server'], workingDir: '/data', ports: [6379] },
};

const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export class ImageBuildError extends Error {
  constructor(step: string, detail: string) {
    super(`npm run images: step '${step}' failed: ${detail}`);
  }
}

/** The checkout paths an image holds under /app, from contents.txt. */
export function imageContents(image: 'operator' | 'sidecar', list = readFileSync(CONTENTS, 'utf8')): string[] {
  return list.split('\n')
    .map((line) => line.replace(/#.*/, '').trim().split(/\s+/))
    .filter((fields): fields is [string, string] => fields.length === 2 && (fields[0] === 'all' || fields[0] === image))
    .map(([, path]) => path);
}

class Rootfs {
  readonly #entries = new Map<string, LayerEntry>();

  dir(path: string, mode = 0o755, owner?: number): void {
    const parts = path.split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i += 1) {
      const p = `/${parts.slice(0, i).join('/')}`;
      if (!this.#entries.has(p)) this.#entries.set(p, { type: 'dir', path: p, mode, uid: owner, gid: owner });
    }
    const own = this.#entries.get(`/${parts.join('/')}`);
    if (own?.type === 'dir' && owner !== undefined) {
      own.uid = owner;
      own.gid = owner;
      own.mode = mode;
    }
  }

  file(path: string, data: Buffer, mode = 0o644): void {
    this.dir(dirname(path));
    this.#entries.set(path, { type: 'file', path, data, mode });
  }

  /** A host file at the same path (or `as`), its content followed through symlinks. */
  hostFile(source: string, as = source, mode?: number): void {
    this.file(as, readFileSync(source), mode ?? (lstatSync(realpathSync(source)).mode & 0o777));
  }

  /** A folder of the checkout, files read-only to everyone but root, tests left out. */
  tree(source: string, as: string): void {
    const stat = lstatSync(source);
    if (stat.isSymbolicLink()) {
      this.dir(dirname(as));
      this.#entries.set(as, { type: 'symlink', path: as, target: readlinkSync(source) });
    } else if (stat.isDirectory()) {
      this.dir(as);
      for (const name of readdirSync(source).sort()) this.tree(join(source, name), `${as}/${name}`);
    } else if (!source.endsWith('.test.ts')) {
      this.file(as, readFileSync(source), stat.mode & 0o111 ? 0o755 : 0o644);
    }
  }

  /** A binary and every shared library `ldd` names, at the paths the loader looks for. */
  binary(source: string, as: string): void {
    this.hostFile(source, as, 0o755);
    for (const lib of sharedLibraries(source)) if (!this.#entries.has(lib)) this.hostFile(lib, lib, 0o755);
  }

  users(users: Array<[string, number]>): void {
    this.file('/etc/passwd', Buffer.from(users.map(([name, id]) => `${name}:x:${id}:${id}:${name}:${id === 0 ? '/root' : '/nonexistent'}:/sbin/nologin\n`).join('')));
    this.file('/etc/group', Buffer.from(users.map(([name, id]) => `${name}:x:${id}:\n`).join('')));
  }

  entries(): LayerEntry[] {
    return [...this.#entries.values()];
  }
}

function sharedLibraries(binary: string): string[] {
  let out: string;
  try {
    out = execFileSync('ldd', [binary], { encoding: 'utf8' });
  } catch (err) {
    throw new ImageBuildError('ldd', `${binary}: ${(err as Error).message}`);
  }
  return out.split('\n').flatMap((line) => {
    const match = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s*\(/.exec(line);
    return match?.[1] ? [match[1]] : [];
  });
}

/** Production node_modules exactly as locked, cached by the lock file's hash. */
function productionModules(cacheDir: string): string {
  const lock = readFileSync(join(ROOT, 'package-lock.json'));
  const dir = join(cacheDir, `node_modules-${createHash('sha256').update(lock).digest('hex').slice(0, 16)}`);
  if (existsSync(join(dir, 'node_modules'))) return join(dir, 'node_modules');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const f of ['package.json', 'package-lock.json']) execFileSync('cp', [join(ROOT, f), dir]);
  try {
    execFileSync('npm', ['ci', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new ImageBuildError('npm-ci-production', (err as { stderr?: Buffer }).stderr?.toString() ?? String(err));
  }
  return join(dir, 'node_modules');
}

function nodeBinary(): string {
  const path = join(ROOT, 'node_modules', 'node', 'bin', 'node');
  if (!existsSync(path)) throw new ImageBuildError('find-node', `${path} is missing: run npm ci first`);
  return realpathSync(path);
}

function gwRootfs(image: 'operator' | 'sidecar', modules: string, cacheDir: string): Rootfs {
  const fs = new Rootfs();
  fs.users([['root', 0], ['nonroot', 65532]]);
  fs.dir('/tmp', 0o1777);
  // Stripped, the binary is a third of its size; symbols serve no one in a container.
  const node = nodeBinary();
  const stripped = join(cacheDir, `node-${createHash('sha256').update(readFileSync(node)).digest('hex').slice(0, 16)}`);
  if (!existsSync(stripped)) {
    try {
      execFileSync('strip', ['-o', stripped, node]);
    } catch {
      execFileSync('cp', [node, stripped]);
    }
  }
  fs.binary(stripped, '/usr/local/bin/node');
  for (const path of imageContents(image)) fs.tree(join(ROOT, path), `/app/${path}`);
  fs.tree(modules, '/app/node_modules');
  if (image === 'operator') {
    // The webhook issues its CA and serving certificate with the openssl CLI.
    fs.binary('/usr/bin/openssl', '/usr/bin/openssl');
    if (existsSync('/usr/lib/ssl/openssl.cnf')) fs.hostFile('/usr/lib/ssl/openssl.cnf');
  }
  return fs;
}

function redisRootfs(): Rootfs {
  for (const binary of ['/usr/bin/redis-server', '/usr/bin/redis-cli']) {
    if (!existsSync(binary)) throw new ImageBuildError('find-redis', `${binary} is missing: apt-get install redis-server redis-tools`);
  }
  const fs = new Rootfs();
  fs.users([['root', 0], ['redis', 999]]);
  fs.dir('/tmp', 0o1777);
  fs.dir('/data', 0o750, 999);
  fs.binary('/usr/bin/redis-server', '/usr/bin/redis-server');
  fs.binary('/usr/bin/redis-cli', '/usr/bin/redis-cli');
  return fs;
}

export interface BuildOptions {
  out: string;
  tag: string;
  images: ProductImage[];
}

export function buildImages(options: BuildOptions): WrittenImage[] {
  mkdirSync(options.out, { recursive: true });
  const cacheDir = join(options.out, '.cache');
  mkdirSync(cacheDir, { recursive: true });
  const modules = options.images.some((i) => i !== 'redis') ? productionModules(cacheDir) : '';
  return options.images.map((image) => {
    const fs = image === 'redis' ? redisRootfs() : gwRootfs(image, modules, cacheDir);
    const runtime = IMAGE_RUNTIME[image];
    const config: ImageConfig = {
      name: `docker.io/library/gw-${image}:${options.tag}`,
      user: runtime.user,
      entrypoint: runtime.entrypoint,
      cmd: runtime.cmd,
      env: image === 'redis' ? [PATH_ENV] : [PATH_ENV, 'NODE_ENV=production'],
      workingDir: runtime.workingDir,
      exposedPorts: runtime.ports,
    };
    return writeImage(join(options.out, `gw-${image}-${options.tag}.tar`), config, fs.entries());
  });
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { out: { type: 'string', default: join(ROOT, 'dist', 'images') }, tag: { type: 'string' } },
  });
  const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  const unknown = positionals.filter((p) => !PRODUCT_IMAGES.includes(p as ProductImage));
  if (unknown.length > 0) {
    process.stderr.write(`npm run images: unknown image ${unknown.join(', ')} (${PRODUCT_IMAGES.join(', ')})\n`);
    process.exit(2);
  }
  const started = Date.now();
  try {
    const written = buildImages({
      out: values.out,
      tag: values.tag ?? version,
      images: positionals.length > 0 ? (positionals as ProductImage[]) : PRODUCT_IMAGES,
    });
    for (const w of written) {
      process.stdout.write(`${w.name}  ${relative(process.cwd(), w.path)}  ${(w.bytes / 1e6).toFixed(1)} MB  ${w.manifestDigest}\n`);
    }
    process.stdout.write(`built ${written.length} image(s) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  }
}
