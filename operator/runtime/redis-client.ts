import type { Cluster, Redis } from 'ioredis';
import type { Logger } from '../../common/logger.ts';
import { createRedisClient, ErrorLogGate, handleConnectionErrors } from '../../common/redis-url.ts';

/**
 * The operator's Redis connection. Commands fail fast while Redis is unreachable (no
 * offline queue, one retry, short timeouts) so a reconcile fails and is retried with
 * backoff instead of hanging; reconnection is ioredis's own. Connection errors are
 * logged (throttled), never thrown into the process. The URL may name one server, a
 * Sentinel set or a Cluster (common/redis-url.ts).
 */
export function createRedis(url: string, log: Logger): Redis | Cluster {
  const redis = createRedisClient(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: 2_000,
    commandTimeout: 2_000,
    retryStrategy: (times) => Math.min(times * 100, 2_000),
  });
  handleConnectionErrors(redis, log, new ErrorLogGate(10_000));
  redis.connect().catch(() => {
    // Reported by the error handler above; ioredis keeps reconnecting.
  });
  return redis;
}

/**
 * Resolves true once `redis` can take commands, false after `timeoutMs`. Commands sent
 * earlier fail at once (no offline queue), so reconciling before this would mark every
 * Key SessionStoreUnavailable on each operator start and flip it back a moment later.
 */
export function whenReady(redis: Redis | Cluster, timeoutMs: number): Promise<boolean> {
  if (redis.status === 'ready') return Promise.resolve(true);
  return new Promise((resolve) => {
    const settle = (ready: boolean): void => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      resolve(ready);
    };
    const onReady = (): void => settle(true);
    const timer = setTimeout(() => settle(false), timeoutMs);
    redis.once('ready', onReady);
  });
}
