import type { Cluster, Redis } from 'ioredis';
import { gatewayHeartbeatKey } from '../../common/redis-keys.ts';
import { defaultGatewaySettings, type GatewaySettings } from '../../crds/settings.ts';
import type { StoreReporter } from './store-health.ts';
import { withTimeout } from './stores/with-timeout.ts';

export interface HeartbeatOptions {
  redis: Redis | Cluster;
  instanceId: string;
  intervalMs: number;
  now: () => number;
  reporter: StoreReporter;
}

/** Each API's gateways whose heartbeat has not expired at `nowMs`, sorted: what `kubectl gw status` shows. */
export async function liveGateways(redis: Redis | Cluster, apiIds: readonly string[], nowMs: number): Promise<Map<string, string[]>> {
  const members = await Promise.all(apiIds.map((api) => redis.zrangebyscore(gatewayHeartbeatKey(api), `(${nowMs}`, '+inf')));
  return new Map(apiIds.map((api, i) => [api, members[i]!.sort()]));
}

/**
 * Live gateways per API for the Distributed Rate Limiter (docs/behaviour.md#algorithms): every interval this
 * gateway renews its member (score = expiry) in the set of each API it serves and reads
 * who else is live. Background only; a request never waits for it.
 */
export class GatewayHeartbeat {
  readonly #options: HeartbeatOptions;
  readonly #ttlMs: number;
  #apis: readonly string[] = [];
  #watched: readonly string[] = [];
  #live = new Map<string, ReadonlySet<string>>();
  /** Union sizes per coverage list (one list object per limit), valid until the next beat. */
  #unions = new WeakMap<readonly string[], number>();
  #timer: NodeJS.Timeout | undefined;
  #timeoutMs = defaultGatewaySettings.redis_timeout_ms;

  constructor(options: HeartbeatOptions) {
    this.#options = options;
    // Three missed beats and a gateway no longer counts.
    this.#ttlMs = options.intervalMs * 3;
  }

  configure(settings: GatewaySettings): void {
    this.#timeoutMs = settings.redis_timeout_ms;
  }

  /**
   * `apiIds`: the APIs this gateway serves (it joins their sets). `alsoWatch`: other APIs
   * whose live gateways it needs to know, those a policy's global allowance shares with
   * an API it serves.
   */
  serve(apiIds: readonly string[], alsoWatch: readonly string[] = []): void {
    this.#apis = apiIds;
    const serving = new Set(apiIds);
    this.#watched = alsoWatch.filter((api) => !serving.has(api));
  }

  start(): void {
    if (this.#timer) return;
    void this.beat();
    this.#timer = setInterval(() => void this.beat(), this.#options.intervalMs).unref();
  }

  get running(): boolean {
    return this.#timer !== undefined;
  }

  /** Leaves every set at once so the other gateways' shares grow on their next beat. */
  async stop(): Promise<void> {
    if (!this.#timer) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    const { redis, instanceId } = this.#options;
    const leave = Promise.all(this.#apis.map((api) => redis.zrem(gatewayHeartbeatKey(api), instanceId)));
    await withTimeout(leave, this.#timeoutMs).catch((error: unknown) => this.#options.reporter.failed(error));
  }

  /** Live gateways serving any of the APIs (this one included), at least 1. */
  count(apiIds: readonly string[]): number {
    if (apiIds.length === 1) return Math.max(1, this.#live.get(apiIds[0]!)?.size ?? 1);
    let size = this.#unions.get(apiIds);
    if (size === undefined) {
      const union = new Set<string>([this.#options.instanceId]);
      for (const api of apiIds) for (const member of this.#live.get(api) ?? []) union.add(member);
      size = union.size;
      this.#unions.set(apiIds, size);
    }
    return size;
  }

  async beat(): Promise<void> {
    const { redis, instanceId, now } = this.#options;
    const nowMs = now();
    try {
      const beats = this.#apis.map(async (api) => {
        const key = gatewayHeartbeatKey(api);
        const replies = await redis
          .multi()
          .zadd(key, nowMs + this.#ttlMs, instanceId)
          .zremrangebyscore(key, '-inf', nowMs)
          .pexpire(key, this.#ttlMs)
          .zrangebyscore(key, `(${nowMs}`, '+inf')
          .exec();
        const members = replies?.[3]?.[1];
        return [api, new Set(Array.isArray(members) ? (members as string[]) : [instanceId])] as const;
      });
      const reads = this.#watched.map(async (api) => {
        const members = await redis.zrangebyscore(gatewayHeartbeatKey(api), `(${nowMs}`, '+inf');
        return [api, new Set(members)] as const;
      });
      this.#live = new Map(await withTimeout(Promise.all([...beats, ...reads]), this.#timeoutMs));
      this.#unions = new WeakMap();
      this.#options.reporter.succeeded();
    } catch (error) {
      // The last known counts stay in force until Redis answers again.
      this.#options.reporter.failed(error);
    }
  }
}
