import { ensureDebianPackages } from './install-debian.ts';
import { findOnPath } from './which.ts';

const REDIS_SERVER = '/usr/bin/redis-server';

/** Path of redis-server, installing Debian's package first when it is absent. */
export async function ensureRedisServer(): Promise<string> {
  const found = findOnPath('redis-server');
  if (found) return found;
  await ensureDebianPackages({
    step: 'install-redis-server',
    packages: ['redis-server', 'redis-tools'],
    provides: [REDIS_SERVER, '/usr/bin/redis-cli'],
  });
  return REDIS_SERVER;
}
