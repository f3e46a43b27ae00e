import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { createRedisClient, ErrorLogGate, reconnectBackoff, handleConnectionErrors } from '../common/redis-url.ts';
import type { Logger } from '../common/logger.ts';
import { limitsCommand } from './limits/stores/limits-script.ts';
import type { SidecarMetrics } from './metrics.ts';

/**
 * The options of the sidecar's Redis client: auto-pipelining across concurrent requests
 * (docs/architecture.md#performance), a per-command timeout so a stalled Redis costs a request
 * at most `commandTimeoutMs`, and reconnection with backoff forever.
 *
 * The limit store's script call (FCALL, or EVALSHA where Redis has no functions) is left out
 * of auto-pipelining: the store already sends one call per event-loop turn for every decision
 * of that turn, and an auto-pipeline around it
 * only added a Pipeline object per call (which V8 came to allocate in the old generation, a
 * full collection every half second at 5,000 requests/s) and held each call back until the
 * previous one had answered. On a Cluster the option stays on the nodes
 * (common/redis-url.ts lifts only the cluster-level options), so there the store's calls,
 * one per limiter slot, still go out together as one batch per node.
 */
export function sidecarRedisOptions(commandTimeoutMs: number): RedisOptions {
  return {
    enableAutoPipelining: true,
    autoPipeliningIgnoredCommands: ['fcall', limitsCommand],
    commandTimeout: commandTimeoutMs,
    maxRetriesPerRequest: 1,
    retryStrategy: reconnectBackoff,
  };
}

/** The sidecar's Redis client, and the last error of its connection since it was last ready. */
export interface SidecarRedis {
  client: Redis | Cluster;
  lastError: () => Error | undefined;
}

/**
 * The sidecar's Redis client (`sidecarRedisOptions`). The URL may name one server, a Sentinel
 * set or a Cluster (common/redis-url.ts). Errors are logged and counted; the engine's
 * failure mode decides what a request does meanwhile.
 */
export function createRedis(url: string, commandTimeoutMs: number, logger: Logger, metrics: SidecarMetrics): SidecarRedis {
  const client = createRedisClient(url, sidecarRedisOptions(commandTimeoutMs));
  const lastError = handleConnectionErrors(client, logger, new ErrorLogGate(5_000), () => metrics.redisErrors.inc());
  client.on('ready', () => logger.info('redis connected'));
  return { client, lastError };
}
