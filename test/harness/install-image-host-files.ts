import { hostJemallocEnv, JEMALLOC } from '../../scripts/images/build.ts';
import { ensureDebianPackages } from './install-debian.ts';
import { ensureRedisServer } from './install-redis.ts';

/** Debian's jemalloc, which the sidecar image preloads (scripts/images/build.ts). */
async function ensureJemalloc(): Promise<void> {
  await ensureDebianPackages({ step: 'install-libjemalloc2', packages: ['libjemalloc2'], provides: [JEMALLOC.host] });
}

/** The environment of a sidecar started on this host as its image runs it, on jemalloc (installed first when absent). */
export async function jemallocEnv(): Promise<ReturnType<typeof hostJemallocEnv>> {
  await ensureJemalloc();
  return hostJemallocEnv();
}

/**
 * The host files `npm run images` puts into the product images besides Node and the
 * libraries it links: Debian's redis-server and redis-cli for the Redis image, jemalloc for
 * the sidecar's.
 */
export async function ensureImageHostFiles(): Promise<void> {
  await ensureRedisServer();
  await ensureJemalloc();
}
