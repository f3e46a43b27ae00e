import type { Cluster, Redis } from 'ioredis';
import type { Registry } from 'prom-client';
import type { Logger } from '../../common/logger.ts';
import { storeProbeKey } from '../../common/redis-keys.ts';
import { GatewayHeartbeat } from './heartbeat.ts';
import { StoreHealth } from './store-health.ts';
import { MemoryLimitStore } from './stores/memory-store.ts';
import { RedisLimitStore } from './stores/redis-store.ts';
import type { LimitStore } from './stores/store.ts';
import { withTimeout } from './stores/with-timeout.ts';

/** How long a probe of a Redis whose calls have been failing waits for its answer (store-health.ts). */
const PROBE_TIMEOUT_MS = 1_000;
/** The probe's key outlives no probe by much: it is written only while calls fail. */
const PROBE_TTL_MS = 10_000;

/**
 * What the engine counts with, built by whoever runs it (sidecar/app.ts, tests, benchmarks)
 * and handed to it: the store of the shared limits, the live gateways that split each DRL
 * limit (none without Redis), and the health both report to.
 */
export interface LimitBackends {
  store: LimitStore;
  peers: GatewayHeartbeat | null;
  /** Whether this gateway takes proxied traffic, and so holds DRL buckets worth reading (an admin-only gateway does not). */
  drlPeer: boolean;
  health: StoreHealth;
}

export interface LimitBackendOptions {
  /** Absent: the in-memory store, one process (standalone mode). */
  redis?: Redis | Cluster;
  instanceId: string;
  logger: Logger;
  registry?: Registry;
  /** This gateway's clock, the engine's too: the in-memory store and the heartbeats read it. */
  now?: () => number;
  /** DRL heartbeat period (about 2 s). */
  heartbeatIntervalMs?: number;
  /** The instance ids of this gateway's other workers, if it runs several (GatewayHeartbeat). */
  siblings?: readonly string[];
  /**
   * Whether this gateway takes proxied traffic and so a share of every DRL limit (default
   * true). An admin-only gateway is no peer: counting it would shrink every other share.
   */
  drlPeer?: boolean;
}

export function createLimitBackends(options: LimitBackendOptions): LimitBackends {
  const { redis, instanceId } = options;
  // A write, as the limit script's calls are: a PING is answered by a Redis that refuses them.
  const probe = redis ? () => withTimeout(redis.set(storeProbeKey(instanceId), '1', 'PX', PROBE_TTL_MS), PROBE_TIMEOUT_MS) : undefined;
  const health = new StoreHealth(options.logger, options.registry, probe);
  const now = options.now ?? Date.now;
  const drlPeer = options.drlPeer !== false;
  if (!redis) return { store: new MemoryLimitStore(now), peers: null, health, drlPeer };
  return {
    store: new RedisLimitStore(redis, { instanceId, reporter: health }),
    peers: options.drlPeer === false
      ? null
      : new GatewayHeartbeat({ redis, instanceId, intervalMs: options.heartbeatIntervalMs ?? 2000, now, reporter: health, siblings: options.siblings }),
    health,
    drlPeer,
  };
}
