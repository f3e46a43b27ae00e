import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { defaultGatewaySettings, type GatewaySettings } from '../../../crds/settings.ts';
import { limiterKey, quotaKey } from '../../../common/redis-keys.ts';
import { clampSmoothing, type LimitStore, type StoreOp, type StoreResult } from './store.ts';
import { withTimeout } from './with-timeout.ts';

const script = readFileSync(new URL('./limits.lua', import.meta.url), 'utf8');
const command = 'gwLimits';
const trimDelayMs = 50;

type Reply = [number, number, number, number, number, number][];
type ScriptClient = Record<typeof command, (...args: (string | number)[]) => Promise<Reply>>;
/** Keys of one op; on a Cluster every script call runs exactly one op. */
const keysPerOp = 2;

interface Encoded {
  keys: [string, string];
  args: (string | number)[];
}

/** Seven ARGV per op, matching the loop in limits.lua. */
function encodeOp(op: StoreOp, nowMs: number): Encoded {
  switch (op.kind) {
    case 'sliding_log': {
      const s = op.smoothing ? clampSmoothing(op.smoothing, op.rate) : null;
      return {
        keys: [limiterKey(op.limiterId, 'log'), limiterKey(op.limiterId, 'smooth')],
        args: ['L', op.rate, op.perMs, s?.threshold ?? 0, s?.step ?? 0, String(s?.trigger ?? 0), (s?.delay ?? 0) * 1000],
      };
    }
    case 'sentinel':
      return {
        keys: [limiterKey(op.limiterId, 'log'), limiterKey(op.limiterId, 'sentinel')],
        args: ['S', op.rate, op.perMs, 0, 0, 0, 0],
      };
    case 'fixed_window': {
      const windowStart = Math.floor(nowMs / op.perMs) * op.perMs;
      const key = limiterKey(op.limiterId, `fw:${windowStart}`);
      return { keys: [key, key], args: ['F', op.rate, op.perMs, windowStart + op.perMs, 0, 0, 0] };
    }
    case 'quota': {
      const key = quotaKey(op.quotaId);
      return { keys: [key, key], args: ['Q', op.max, op.renewalMs, op.initRemaining, op.initRenewsMs, 0, 0] };
    }
  }
}

function toResult([allowed, limit, remaining, resetMs, oldAllowance, newAllowance]: Reply[number]): StoreResult {
  return {
    allowed: allowed === 1,
    limit,
    remaining,
    resetMs,
    smoothing: oldAllowance !== newAllowance ? { oldAllowance, newAllowance } : null,
  };
}

/**
 * Shared state in Redis: one Lua script per decision, run by EVALSHA (ioredis
 * `defineCommand` sends EVALSHA and reloads the script on NOSCRIPT), so a request pays
 * one round trip for every limit it meets.
 */
export class RedisLimitStore implements LimitStore {
  readonly #redis: Redis | Cluster;
  readonly #client: ScriptClient;
  readonly #instanceId: string;
  readonly #onBackgroundError: (error: unknown) => void;
  #settings: GatewaySettings = defaultGatewaySettings;
  #sequence = 0;
  /** Sentinel logs to trim: log key -> window and the latest decision time. */
  readonly #pendingTrims = new Map<string, { perMs: number; nowMs: number }>();
  #trimTimer: NodeJS.Timeout | undefined;

  constructor(redis: Redis | Cluster, instanceId: string, onBackgroundError: (error: unknown) => void) {
    this.#redis = redis;
    this.#instanceId = instanceId;
    this.#onBackgroundError = onBackgroundError;
    // ioredis auto-pipelining routes a script call on a Cluster by its first argument:
    // the key count, unless the command declares a fixed one. So on a Cluster (one op,
    // two keys per call) it is declared, and the first argument is the op's first key.
    if (!(command in redis)) redis.defineCommand(command, { lua: script, numberOfKeys: redis.isCluster ? keysPerOp : undefined });
    this.#client = redis as unknown as ScriptClient;
  }

  configure(settings: GatewaySettings): void {
    this.#settings = settings;
  }

  async run(ops: readonly StoreOp[], nowMs: number): Promise<StoreResult[]> {
    const results = this.#redis.isCluster ? await this.#runOnCluster(ops, nowMs) : await this.#eval(ops, nowMs);
    this.#trimSentinelLogs(ops.slice(0, results.length), nowMs);
    return results;
  }

  async close(): Promise<void> {
    // The client belongs to the caller; pending trims go out now, best effort.
    clearTimeout(this.#trimTimer);
    if (this.#pendingTrims.size > 0) this.#flushTrims();
  }

  #eval(ops: readonly StoreOp[], nowMs: number): Promise<StoreResult[]> {
    const encoded = ops.map((op) => encodeOp(op, nowMs));
    const keys = encoded.flatMap((e) => e.keys);
    const member = `${this.#instanceId}:${(this.#sequence = (this.#sequence + 1) % Number.MAX_SAFE_INTEGER)}`;
    const args = [...keys, nowMs, member, ...encoded.flatMap((e) => e.args)];
    const reply = this.#redis.isCluster ? this.#client[command](...args) : this.#client[command](keys.length, ...args);
    return withTimeout(reply, this.#settings.redis_timeout_ms).then((rows) => rows.map(toResult));
  }

  /**
   * On Redis Cluster a script may only touch one slot, and the limiters of one request
   * sit in different slots (each limiter's keys share a hash tag). So each rate limit runs
   * as its own script, all sent at once (one pipelined batch per node, one round trip of
   * latency); the quota follows only when all of them passed. Unlike standalone Redis, a
   * refusal by one limiter does not keep the request from counting against the others.
   */
  async #runOnCluster(ops: readonly StoreOp[], nowMs: number): Promise<StoreResult[]> {
    const rateOps = ops.filter((op) => op.kind !== 'quota');
    const quotaOps = ops.filter((op) => op.kind === 'quota');
    const rateResults = (await Promise.all(rateOps.map((op) => this.#eval([op], nowMs)))).map(([r]) => r!);
    const refused = rateResults.findIndex((r) => !r.allowed);
    if (refused >= 0) return rateResults.slice(0, refused + 1);
    return quotaOps.length > 0 ? [...rateResults, ...(await this.#eval(quotaOps, nowMs))] : rateResults;
  }

  /**
   * The sentinel's log writes happen off the request path: logs touched by decisions are
   * trimmed together every `trimDelayMs`, in a MULTI, or a plain pipeline with
   * enable_non_transactional_rate_limiter. One batch per flush on standalone Redis; one
   * per log on a Cluster, where a batch must stay in one slot.
   */
  #trimSentinelLogs(ops: readonly StoreOp[], nowMs: number): void {
    for (const op of ops) {
      if (op.kind === 'sentinel') this.#pendingTrims.set(limiterKey(op.limiterId, 'log'), { perMs: op.perMs, nowMs });
    }
    if (this.#pendingTrims.size === 0 || this.#trimTimer) return;
    this.#trimTimer = setTimeout(() => this.#flushTrims(), trimDelayMs).unref();
  }

  #flushTrims(): void {
    this.#trimTimer = undefined;
    const trims = [...this.#pendingTrims];
    this.#pendingTrims.clear();
    const groups = this.#redis.isCluster ? trims.map((trim) => [trim]) : [trims];
    for (const group of groups) {
      const batch = this.#settings.enable_non_transactional_rate_limiter ? this.#redis.pipeline() : this.#redis.multi();
      for (const [log, { perMs, nowMs }] of group) batch.zremrangebyscore(log, '-inf', nowMs - perMs).pexpire(log, perMs);
      batch.exec().catch(this.#onBackgroundError);
    }
  }
}
