import type { Cluster, Redis } from 'ioredis';
import { createRedisClient, reportConnectionErrors } from '../common/redis-url.ts';
import type { Logger } from '../common/logger.ts';
import type { SidecarMetrics } from './metrics.ts';

/**
 * The sidecar's Redis client: auto-pipelining across concurrent requests (docs/architecture.md#performance),
 * a per-command timeout so a stalled Redis costs a request at most `commandTimeoutMs`,
 * and reconnection with backoff forever. The URL may name one server, a Sentinel set or
 * a Cluster (common/redis-url.ts). Errors are logged and counted; the engine's
 * failure mode decides what a request does meanwhile.
 */
export function createRedis(url: string, commandTimeoutMs: number, logger: Logger, metrics: SidecarMetrics): Redis | Cluster {
  const redis = createRedisClient(url, {
    enableAutoPipelining: true,
    commandTimeout: commandTimeoutMs,
    maxRetriesPerRequest: 1,
    retryStrategy: (attempt) => Math.min(100 * 2 ** Math.min(attempt, 5), 3000),
  });
  reportConnectionErrors(redis, logger, 5_000, () => metrics.redisErrors.inc());
  redis.on('ready', () => logger.info('redis connected'));
  return redis;
}
