import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import type { CompiledConfig } from '../../../crds/compiled.ts';
import { createLimitBackends } from '../../../sidecar/limits/backends.ts';
import { createLimitEngine } from '../../../sidecar/limits/engine.ts';
import { collectingSink } from '../../support/limits-fixtures.ts';
import type { LimitEngine, LimitRequest, SmoothingEvent } from '../../../sidecar/limits/types.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';

/** A gateway as the tests see it: its own engine, Redis connection, events and metrics. */
export interface Gateway {
  engine: LimitEngine;
  redis: Redis;
  events: SmoothingEvent[];
  registry: Registry;
  logs: string[];
  /** The time the engine used for its latest decision (read right after calling decide). */
  lastNow(): number;
}

const open: Gateway[] = [];

export function uniqueId(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export function redisClient(url: string): Redis {
  const redis = new Redis(url, { commandTimeout: 1000, maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  // Connection errors are expected while a test has Redis stopped; the engine reports them.
  redis.on('error', () => undefined);
  return redis;
}

export function startGateway(
  config: CompiledConfig,
  redisUrl: string,
  options: { instanceId?: string; heartbeatIntervalMs?: number; clockOffsetMs?: number } = {},
): Gateway {
  const offset = options.clockOffsetMs ?? 0;
  const redis = redisClient(redisUrl);
  const sink = collectingSink();
  const registry = new Registry();
  const logs: string[] = [];
  let last = 0;
  const logger = collectingLogger(logs);
  const now = (): number => (last = Date.now() + offset);
  const engine = createLimitEngine({
    config,
    backends: createLimitBackends({
      redis,
      instanceId: options.instanceId ?? uniqueId('gw'),
      logger,
      registry,
      now,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 200,
    }),
    events: sink,
    logger,
    registry,
    now,
  });
  const gateway = { engine, redis, events: sink.events, registry, logs, lastNow: () => last };
  open.push(gateway);
  return gateway;
}

export async function stopGateway(gateway: Gateway): Promise<void> {
  const i = open.indexOf(gateway);
  if (i >= 0) open.splice(i, 1);
  await gateway.engine.close();
  gateway.redis.disconnect();
}

export async function stopAllGateways(): Promise<void> {
  await Promise.all([...open].map(stopGateway));
}

/**
 * One decision and when it happened: limiters in Redis read Redis's clock while the
 * script runs, some time between the engine starting the decision (`at`, the gateway's
 * clock) and its answer (`done`); Redis runs on this machine, so both clocks agree.
 * `reset` is the decision's X-RateLimit-Reset (for a fixed window, the end of the window
 * that counted it).
 */
export async function timedDecide(
  gateway: Gateway,
  request: LimitRequest,
): Promise<{ outcome: string; at: number; done: number; reset: number | null }> {
  const pending = gateway.engine.decide(request);
  const at = gateway.lastNow();
  const decision = await pending;
  return { outcome: decision.outcome, at, done: Date.now(), reset: decision.rate?.reset ?? null };
}

/** `total` concurrent decisions spread round-robin over the gateways; allowed counts per gateway. */
export async function burst(gateways: readonly Gateway[], request: LimitRequest, total: number): Promise<number[]> {
  const outcomes = await Promise.all(
    Array.from({ length: total }, async (_, i) => [i % gateways.length, (await gateways[i % gateways.length]!.engine.decide(request)).outcome] as const),
  );
  const allowed = gateways.map(() => 0);
  for (const [g, outcome] of outcomes) if (outcome === 'allowed') allowed[g]! += 1;
  return allowed;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until just after the next multiple of `periodMs` (fixed windows are aligned to per). */
export async function alignTo(periodMs: number, offsetMs = 20): Promise<void> {
  await sleep(periodMs - (Date.now() % periodMs) + offsetMs);
}

export async function metricValues(registry: Registry, name: string): Promise<Record<string, number>> {
  const metric = await registry.getSingleMetric(name)?.get();
  return Object.fromEntries((metric?.values ?? []).map((v) => [Object.values(v.labels).join('/') || 'total', v.value]));
}

/**
 * Commands clients send to Redis, counted by name from MONITOR. Commands a Lua script
 * runs inside Redis are left out: they cost no round trip (INFO commandstats counts
 * them too, which is why it cannot measure round trips).
 */
export async function watchCommands(url: string): Promise<{ counts(): Record<string, number>; stop(): void }> {
  // Only the MONITOR connection connects (the base client is lazy). ioredis switches that
  // connection to monitoring one microtask after MONITOR's OK; a command another client sends
  // meanwhile (the base client's own ready check, when it connected too) arrives in the same
  // read and ioredis takes it for a reply nobody asked for ("Command queue state error").
  const client = new Redis(url, { lazyConnect: true });
  const monitor = await client.monitor();
  const counts: Record<string, number> = {};
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source === 'lua') return;
    const command = args[0]!.toLowerCase();
    counts[command] = (counts[command] ?? 0) + 1;
  });
  return {
    counts: () => ({ ...counts }),
    stop: () => {
      monitor.disconnect();
      client.disconnect();
    },
  };
}
