/**
 * npm run images [-- [--out DIR] [--tag TAG] [operator|sidecar|redis ...]]
 *
 * Builds gw's images as OCI archives (DIR/gw-<image>-<tag>.tar, default dist/images and the
 * package version) for clusters without a registry or Docker: `ctr -n k8s.io images import`
 * on each node. The same images as the Dockerfile's targets: the program's bundle
 * (scripts/build/bundle.ts) in /app, Node 24 from the `node` package with the shared libraries
 * it links, jemalloc, openssl for the operator, user 65532; the redis image is Debian's
 * redis-server as user 999.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { bundle, type Program } from '../build/bundle.ts';
import { partialPath, publish, pruneOthers } from './cache.ts';
import { writeImage, type WrittenImage } from './oci.ts';
import { ImageBuildError, requireHostFile, Rootfs } from './rootfs.ts';

export const ROOT = join(import.meta.dirname, '..', '..');
export const DEFAULT_OUT = join(ROOT, 'dist', 'images');

export type ProductImage = 'operator' | 'sidecar' | 'redis';
export const PRODUCT_IMAGES: ProductImage[] = ['operator', 'sidecar', 'redis'];

export interface ImageRuntime {
  user: string;
  entrypoint?: string[];
  cmd?: string[];
  workingDir: string;
  /** What the Dockerfile sets with ENV; the archives add PATH, which Docker's base images carry. */
  env: string[];
  ports: number[];
}

/**
 * The allocator of both programs: jemalloc, preloaded. glibc's malloc keeps the memory a burst
 * of work made it take (its main heap only shrinks from the top), so a sidecar stayed at its
 * peak long after a burst of traffic; jemalloc gives pages back within about a second of their
 * last use (`dirty_decay_ms`), from its own thread while the process is idle
 * (`background_thread`). docs/architecture.md#the-images has the figures.
 */
export const JEMALLOC = {
  path: '/usr/local/lib/libjemalloc.so.2',
  /** Where Debian's libjemalloc2 puts it, which the archives copy. */
  host: '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2',
  conf: 'background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0',
};
const JEMALLOC_ENV = [`LD_PRELOAD=${JEMALLOC.path}`, `MALLOC_CONF=${JEMALLOC.conf}`];

/** The environment that runs a program on this host with the allocator its image preloads. */
export function hostJemallocEnv(): { LD_PRELOAD: string; MALLOC_CONF: string } {
  return { LD_PRELOAD: hostJemalloc(), MALLOC_CONF: JEMALLOC.conf };
}

const hostJemalloc = (): string => requireHostFile('find-jemalloc', JEMALLOC.host, "Debian's libjemalloc2");

/**
 * V8's flags in each image's entrypoint (Node does not take them from NODE_OPTIONS). The operator
 * mostly waits on the API server: V8 sized for memory holds its caches in less RSS at the same
 * reconcile rate. The sidecar must not pretenure: a request's objects are still alive at a young
 * collection while the request is in flight, and V8 sometimes decides, early in a process's life,
 * to allocate them in the old generation from then on; with a small old space (the chart's 160
 * MiB) that process then runs about ten full collections a second for as long as it lives, at
 * 1.5 to 2 times the CPU per request (docs/benchmarks.md#fresh-starts).
 */
const NODE_FLAGS = { operator: ['--optimize-for-size'], sidecar: ['--no-allocation-site-pretenuring'] };

/** What the images run, as the Dockerfile states it; a unit test holds the two together. */
export const IMAGE_RUNTIME: Record<ProductImage, ImageRuntime> = {
  operator: { user: '65532:65532', entrypoint: ['node', ...NODE_FLAGS.operator, 'gw-operator.mjs'], workingDir: '/app', env: ['NODE_ENV=production', ...JEMALLOC_ENV], ports: [8082, 9443] },
  sidecar: { user: '65532:65532', entrypoint: ['node', ...NODE_FLAGS.sidecar, 'gw-sidecar.mjs'], workingDir: '/app', env: ['NODE_ENV=production', ...JEMALLOC_ENV], ports: [8080, 8081, 8082] },
  redis: { user: '999:999', cmd: ['redis-server'], workingDir: '/data', env: [], ports: [6379] },
};

/** Node's own flags in a gw image's entrypoint, for running its bundle on this host as the image runs it. */
export function imageNodeFlags(image: 'operator' | 'sidecar'): string[] {
  return NODE_FLAGS[image];
}

export const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The `node` devDependency's binary without its symbols (about 18 MB that no container uses). */
function strippedNode(cacheDir: string): string {
  const node = realpathSync(requireHostFile('find-node', join(ROOT, 'node_modules', 'node', 'bin', 'node'), 'the `node` devDependency: run npm ci'));
  const stripped = join(cacheDir, `node-${createHash('sha256').update(readFileSync(node)).digest('hex').slice(0, 16)}`);
  if (existsSync(stripped)) return stripped;
  try {
    execFileSync('strip', ['-o', partialPath(stripped), node], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    rmSync(partialPath(stripped), { force: true });
    throw new ImageBuildError('strip-node', `strip ${node}: ${(err as Error).message} (strip is in Debian's binutils)`);
  }
  publish(partialPath(stripped), stripped);
  pruneOthers(stripped, 'node-');
  return stripped;
}

function gwRootfs(image: Program, bundleDir: string, node: string): Rootfs {
  const fs = new Rootfs();
  fs.users([['root', 0], ['nonroot', 65532]]);
  // The chart mounts an emptyDir here (the operator's openssl works in a temporary folder);
  // without one, the folder is at least there.
  fs.dir('/tmp', 0o1777);
  fs.binary(node, '/usr/local/bin/node');
  fs.binary(hostJemalloc(), JEMALLOC.path);
  fs.tree(bundleDir, '/app');
  if (image === 'operator') {
    // The webhook issues its CA and serving certificate with the openssl CLI.
    fs.binary(requireHostFile('find-openssl', '/usr/bin/openssl', "Debian's openssl"), '/usr/bin/openssl');
    fs.hostFile(requireHostFile('find-openssl', '/usr/lib/ssl/openssl.cnf', "Debian's openssl"));
  }
  return fs;
}

function redisRootfs(): Rootfs {
  const fs = new Rootfs();
  fs.users([['root', 0], ['redis', 999]]);
  fs.dir('/tmp', 0o1777);
  // The chart mounts the data volume here; without one, the redis user can still write.
  fs.dir('/data', 0o750, 999);
  // Debian ships redis-server as a symlink to redis-check-rdb; the binary picks its mode by
  // the name it runs as, so it goes in as a file named redis-server.
  fs.binary(requireHostFile('find-redis', '/usr/bin/redis-server', "Debian's redis-server"), '/usr/bin/redis-server');
  // The chart's probes run redis-cli ping.
  fs.binary(requireHostFile('find-redis', '/usr/bin/redis-cli', "Debian's redis-tools"), '/usr/bin/redis-cli');
  return fs;
}

export interface BuildOptions {
  /** Folder of the archives. */
  out: string;
  tag: string;
  images: ProductImage[];
  /** The stripped Node binary, kept between builds; default `<out>/.cache`. */
  cacheDir?: string;
}

/** Writes (or leaves as they are when up to date) `<out>/gw-<image>-<tag>.tar` for each image. */
export async function buildImages(options: BuildOptions): Promise<WrittenImage[]> {
  mkdirSync(options.out, { recursive: true });
  const cacheDir = options.cacheDir ?? join(options.out, '.cache');
  mkdirSync(cacheDir, { recursive: true });
  const needsNode = options.images.some((image) => image !== 'redis');
  const node = needsNode ? strippedNode(cacheDir) : '';
  // Bundled afresh each time (about 2 s): the bundle is a function of the checkout, and an
  // archive whose content did not change is left as it is.
  const bundles = join(options.out, '.bundle');
  for (const image of options.images) if (image !== 'redis') await bundle(image, bundles);
  return options.images.map((image) => {
    const fs = image === 'redis' ? redisRootfs() : gwRootfs(image, join(bundles, image), node);
    const { env, ports, ...runtime } = IMAGE_RUNTIME[image];
    return writeImage(join(options.out, `gw-${image}-${options.tag}.tar`), {
      ...runtime,
      name: `gw-${image}:${options.tag}`,
      env: [PATH_ENV, ...env],
      exposedPorts: ports,
    }, fs.entries());
  });
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { out: { type: 'string', default: DEFAULT_OUT }, tag: { type: 'string' } },
  });
  const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  const unknown = positionals.filter((p) => !PRODUCT_IMAGES.includes(p as ProductImage));
  if (unknown.length > 0) {
    process.stderr.write(`npm run images: unknown image ${unknown.join(', ')} (known: ${PRODUCT_IMAGES.join(', ')})\n`);
    process.exit(2);
  }
  const started = Date.now();
  try {
    const written = await buildImages({
      out: values.out,
      tag: values.tag ?? version,
      images: positionals.length > 0 ? [...new Set(positionals as ProductImage[])] : PRODUCT_IMAGES,
    });
    for (const w of written) {
      const size = `${(w.bytes / 1e6).toFixed(1)} MB`;
      process.stdout.write(`${w.name}  ${w.manifestDigest}  ${size}  ${relative(process.cwd(), w.path)}${w.reused ? '  (up to date)' : ''}\n`);
    }
    process.stdout.write(`${written.length} image(s) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  } catch (err) {
    process.stderr.write(`npm run images: ${(err as Error).message}\n`);
    process.exit(1);
  }
}

if (import.meta.main) await main();
