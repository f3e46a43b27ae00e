import type { Cluster, Redis } from 'ioredis';
import type { CompiledConfig } from '../../../crds/compiled.ts';
import { createLimitBackends } from '../../../sidecar/limits/backends.ts';
import { createLimitEngine } from '../../../sidecar/limits/engine.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { collectingSink } from '../../support/limits-fixtures.ts';
import type { LimitEngine, LimitRequest } from '../../../sidecar/limits/types.ts';
import { createSidecarMetrics, type SidecarMetrics } from '../../../sidecar/metrics.ts';
import { createRedis } from '../../../sidecar/redis.ts';
import { sleep, uniqueId } from '../limits/helpers.ts';

/**
 * A gateway as these tests see it: the sidecar's own Redis client (sidecar/redis.ts, so
 * the URL goes through common/redis-url.ts as in production) and a limit engine on it.
 */
export interface TopologyGateway {
  engine: LimitEngine;
  redis: Redis | Cluster;
  /** The last error of the connection since it was last ready, as /readyz names it. */
  lastError: () => Error | undefined;
  metrics: SidecarMetrics;
  logs: string[];
}

const open: TopologyGateway[] = [];

export function startGateway(
  config: CompiledConfig,
  url: string,
  options: { heartbeatIntervalMs?: number; commandTimeoutMs?: number; instanceId?: string } = {},
): TopologyGateway {
  const logs: string[] = [];
  const logger = collectingLogger(logs);
  const metrics = createSidecarMetrics();
  const { client: redis, lastError } = createRedis(url, options.commandTimeoutMs ?? 2000, logger, metrics);
  const engine = createLimitEngine({
    config,
    backends: createLimitBackends({
      redis,
      instanceId: options.instanceId ?? uniqueId('gw'),
      logger,
      registry: metrics.registry,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 200,
    }),
    events: collectingSink(),
    logger,
    registry: metrics.registry,
  });
  const gateway = { engine, redis, lastError, metrics, logs };
  open.push(gateway);
  return gateway;
}

export async function stopAllGateways(): Promise<void> {
  const all = open.splice(0);
  await Promise.all(all.map((g) => g.engine.close()));
  for (const g of all) g.redis.disconnect();
}

/** Resolves once the client is connected (to every master, for a cluster). */
export async function waitReady(redis: Redis | Cluster, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (redis.status !== 'ready') {
    if (Date.now() > deadline) throw new Error(`redis client not ready after ${timeoutMs} ms (status ${redis.status})`);
    await sleep(50);
  }
}

/** `total` concurrent decisions spread round-robin over the gateways, counted by outcome. */
export async function burstOutcomes(gateways: readonly TopologyGateway[], request: LimitRequest, total: number): Promise<Record<string, number>> {
  const decisions = await Promise.all(Array.from({ length: total }, (_, i) => gateways[i % gateways.length]!.engine.decide(request)));
  const counts: Record<string, number> = {};
  for (const { outcome } of decisions) counts[outcome] = (counts[outcome] ?? 0) + 1;
  return counts;
}
