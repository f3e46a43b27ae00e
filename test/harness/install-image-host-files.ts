import { hostJemallocEnv, JEMALLOC } from '../../scripts/images/build.ts';
import { ensureDebianPackages } from './install-debian.ts';
import { ensureRedisServer } from './install-redis.ts';

/** Debian's jemalloc, which the gw images preload (scripts/images/build.ts). */
async function ensureJemalloc(): Promise<void> {
  await ensureDebianPackages({ step: 'install-libjemalloc2', packages: ['libjemalloc2'], provides: [JEMALLOC.host] });
}

/** The environment of a gw program started on this host as its image runs it, on jemalloc (installed first when absent). */
export async function jemallocEnv(): Promise<ReturnType<typeof hostJemallocEnv>> {
  await ensureJemalloc();
  return hostJemallocEnv();
}

/**
 * The host files `npm run images` puts into the product images besides Node and the
 * libraries it links: jemalloc for gw's, Debian's redis-server and redis-cli for the Redis
 * image.
 */
export async function ensureImageHostFiles(): Promise<void> {
  await ensureRedisServer();
  await ensureJemalloc();
}
