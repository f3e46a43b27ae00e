import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { defaultGatewaySettings, type GatewaySettings } from '../../../crds/settings.ts';
import { limiterKey, quotaKey } from '../../../common/redis-keys.ts';
import { clampSmoothing, type LimitStore, type StoreOp, type StoreResult } from './store.ts';
import { withTimeout } from './with-timeout.ts';

const script = readFileSync(new URL('./limits.lua', import.meta.url), 'utf8');
const command = 'gwLimits';
const trimDelayMs = 50;

type Row = [number, number, number, number, number, number];
/** limits.lua's reply: Redis's time (Unix ms), then one row per op run. */
type Reply = [number, ...Row[]];
type ScriptClient = Record<typeof command, (...args: (string | number)[]) => Promise<Reply>>;
/** Keys of one op; on a Cluster every script call runs exactly one op. */
const keysPerOp = 2;

interface Encoded {
  keys: [string, string];
  args: (string | number)[];
}

/** What one script call ran: Redis's time during the call and the results of its ops. */
interface Ran {
  nowMs: number;
  results: StoreResult[];
}

/** Seven ARGV per op, matching the loop in limits.lua. */
function encodeOp(op: StoreOp): Encoded {
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
      // The script names the window (`fw:<start>`) from Redis's time.
      const key = limiterKey(op.limiterId, 'fw');
      return { keys: [key, key], args: ['F', op.rate, op.perMs, 0, 0, 0, 0] };
    }
    case 'quota': {
      const key = quotaKey(op.quotaId);
      return { keys: [key, key], args: ['Q', op.max, op.renewalMs, op.initRemaining, op.initRenewsMs, 0, 0] };
    }
  }
}

/**
 * On a Cluster, the call that undoes what `op` did when it ran alone in its own call (as
 * the call's first op, so its log entry is `<member>:1`); null when there is nothing to
 * undo. The sliding log logged the request either way; a sentinel only when it admitted
 * it, and then the block flag is this request's own when no allowance was left
 * (remaining 0); a fixed window counted it either way, in the window its reset ends.
 */
function encodeUndo(op: StoreOp, result: StoreResult): Encoded | null {
  switch (op.kind) {
    case 'sliding_log':
      return { keys: [limiterKey(op.limiterId, 'log'), limiterKey(op.limiterId, 'smooth')], args: ['l', 1, 0, 0, 0, 0, 0] };
    case 'sentinel':
      if (!result.allowed) return null;
      return {
        keys: [limiterKey(op.limiterId, 'log'), limiterKey(op.limiterId, 'sentinel')],
        args: ['s', 1, result.remaining === 0 ? 1 : 0, 0, 0, 0, 0],
      };
    case 'fixed_window': {
      const key = limiterKey(op.limiterId, 'fw');
      return { keys: [key, key], args: ['f', result.resetMs - op.perMs, 0, 0, 0, 0, 0] };
    }
    case 'quota':
      return null;
  }
}

function toResult([allowed, limit, remaining, resetMs, oldAllowance, newAllowance]: Row): StoreResult {
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
 * one round trip for every limit it meets, refunds included (a Cluster is the
 * exception, see `#runOnCluster`). Every time a limiter reads is Redis's own clock.
 */
export class RedisLimitStore implements LimitStore {
  readonly #redis: Redis | Cluster;
  readonly #client: ScriptClient;
  readonly #instanceId: string;
  readonly #onBackgroundError: (error: unknown) => void;
  #settings: GatewaySettings = defaultGatewaySettings;
  #sequence = 0;
  /** Sentinel logs to trim: log key -> window and Redis's time at the latest decision. */
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

  async run(ops: readonly StoreOp[], refused: boolean): Promise<StoreResult[]> {
    const member = `${this.#instanceId}:${(this.#sequence = (this.#sequence + 1) % Number.MAX_SAFE_INTEGER)}`;
    if (this.#redis.isCluster) return this.#runOnCluster(ops, refused, member);
    const { nowMs, results } = await this.#eval(ops.map(encodeOp), member, refused);
    this.#trimSentinelLogs(ops.slice(0, results.length), nowMs);
    return results;
  }

  async close(): Promise<void> {
    // The client belongs to the caller; pending trims go out now, best effort.
    clearTimeout(this.#trimTimer);
    if (this.#pendingTrims.size > 0) this.#flushTrims();
  }

  #eval(encoded: readonly Encoded[], member: string, refused: boolean): Promise<Ran> {
    const keys = encoded.flatMap((e) => e.keys);
    const args = [...keys, member, refused ? 1 : 0, ...encoded.flatMap((e) => e.args)];
    const reply = this.#redis.isCluster ? this.#client[command](...args) : this.#client[command](keys.length, ...args);
    return withTimeout(reply, this.#settings.redis_timeout_ms).then(([nowMs, ...rows]) => ({ nowMs, results: rows.map(toResult) }));
  }

  /**
   * On Redis Cluster a script may only touch one slot, and the limiters of one request
   * sit in different slots (each limiter's keys share a hash tag). So each rate limit runs
   * as its own script, all sent at once (one pipelined batch per node: one round trip);
   * the quota follows, a second round trip, only when all of them passed. A refusal
   * (or a quota refused after them) costs one more round trip before the answer: undoing
   * what the other limiters recorded, so a refused request consumes nothing there either.
   */
  async #runOnCluster(ops: readonly StoreOp[], refused: boolean, member: string): Promise<StoreResult[]> {
    const rateOps = ops.filter((op) => op.kind !== 'quota');
    const quotaOps = ops.filter((op) => op.kind === 'quota');
    const ran = await Promise.all(rateOps.map((op) => this.#eval([encodeOp(op)], member, false)));
    rateOps.forEach((op, i) => this.#trimSentinelLogs([op], ran[i]!.nowMs));
    const results = ran.map(({ results: [result] }) => result!);
    const refusedAt = results.findIndex((r) => !r.allowed);
    if (refused || refusedAt >= 0) {
      await this.#undoOnCluster(rateOps, results, refusedAt, member);
      return refusedAt >= 0 ? results.slice(0, refusedAt + 1) : results;
    }
    if (quotaOps.length === 0) return results;
    const quota = (await this.#eval(quotaOps.map(encodeOp), member, false)).results;
    if (quota.some((r) => !r.allowed)) await this.#undoOnCluster(rateOps, results, -1, member);
    return [...results, ...quota];
  }

  /**
   * Undoes every rate op but the refusing one (`keep`), each in its own slot. A failure
   * here is reported and the decision stands: the limiters then count the request as
   * they did before refunds existed.
   */
  async #undoOnCluster(rateOps: readonly StoreOp[], results: readonly StoreResult[], keep: number, member: string): Promise<void> {
    const undos = rateOps.flatMap((op, i) => (i === keep ? [] : (encodeUndo(op, results[i]!) ?? [])));
    await Promise.all(undos.map((undo) => this.#eval([undo], member, false))).catch(this.#onBackgroundError);
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
