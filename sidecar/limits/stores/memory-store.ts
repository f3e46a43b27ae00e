import type { CompiledSmoothing } from '../../../crds/compiled.ts';
import { smoothStep, type SmoothingState } from './smoothing.ts';
import { clampSmoothing, type LimitStore, type PeekResult, type StoreOp, type StoreResult } from './store.ts';
import { TtlMap } from './ttl-map.ts';

type Op<K extends StoreOp['kind']> = Extract<StoreOp, { kind: K }>;

const sweepIntervalMs = 10_000;

const result = (allowed: boolean, limit: number, remaining: number, resetMs: number): StoreResult => ({
  allowed,
  limit,
  remaining,
  resetMs,
  smoothing: null,
});

/** A limiter's count against its allowance: what is left, never below 0. */
const peeked = (count: number, limit: number, resetMs: number): PeekResult => ({ count, limit, remaining: Math.max(0, limit - count), resetMs });

/** A smoothed allowance kept between the limit's threshold and rate as they are now. */
/** A fixed window's counter, named by its length and its start, as the Redis script names it. */
const fixedWindowKey = (op: Op<'fixed_window'>, windowStart: number): string => `${op.limiterId}:${op.perMs}:${windowStart}`;

const withinBounds = (allowance: number, threshold: number, rate: number): number => Math.max(threshold, Math.min(rate, allowance));

/**
 * The time of the sliding-log entry whose leaving the window lets a caller refused by `n`
 * entries (its own included) in again, if it sends nothing more (limits.lua `readmit_reset`).
 * `log` is in time order; a peek's would-be request is not in it, and would be `nowMs`.
 */
const readmittedAt = (log: readonly number[], n: number, allowance: number, nowMs: number): number => log[n - allowance] ?? nowMs;

/** An op's result and, when it admitted the request, how to give the admission back. */
interface Ran {
  result: StoreResult;
  undo?: () => void;
}

/**
 * The standalone store (docs/architecture.md#processes): the algorithms of limits.lua for one process, on the
 * process's clock (one process, one clock). Each run is synchronous, so it is as atomic
 * as the script is in Redis.
 */
export class MemoryLimitStore implements LimitStore {
  readonly #logs = new TtlMap<number[]>();
  /** Sentinel flags; the value is the flag's own expiry (the reset time of a refusal). */
  readonly #flags = new TtlMap<number>();
  readonly #smoothing = new TtlMap<SmoothingState>();
  readonly #counters = new TtlMap<number>();
  /**
   * `balance`: what is left, below 0 once a lowered max took away more than was left;
   * `max`: the quota's max it was counted against (limits.lua's quota_state).
   */
  readonly #quotas = new TtlMap<{ balance: number; renews: number; max: number }>();
  readonly #sweeper: NodeJS.Timeout;
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
    this.#sweeper = setInterval(() => this.#sweep(), sweepIntervalMs).unref();
  }

  configure(): void {
    // Settings only shape the Redis store's transport.
  }

  async run(ops: readonly StoreOp[], refused: boolean): Promise<StoreResult[]> {
    const nowMs = this.#now();
    const results: StoreResult[] = [];
    const undo: (() => void)[] = [];
    let refusedHere = false;
    for (const op of ops) {
      const ran = this.#runOne(op, nowMs);
      results.push(ran.result);
      if (ran.undo) undo.push(ran.undo);
      if (!ran.result.allowed) {
        refusedHere = true;
        break;
      }
    }
    if (refused || refusedHere) for (const giveBack of undo) giveBack();
    return results;
  }

  async peek(ops: readonly StoreOp[]): Promise<PeekResult[]> {
    const nowMs = this.#now();
    return ops.map((op) => this.#peekOne(op, nowMs));
  }

  async close(): Promise<void> {
    clearInterval(this.#sweeper);
    for (const map of [this.#logs, this.#flags, this.#smoothing, this.#counters, this.#quotas]) map.clear();
  }

  #runOne(op: StoreOp, nowMs: number): Ran {
    switch (op.kind) {
      case 'sliding_log':
        return this.#sliding(op, nowMs);
      case 'sentinel':
        return this.#sentinel(op, nowMs);
      case 'fixed_window':
        return this.#fixed(op, nowMs);
      case 'quota':
        // Checked last: nothing after it can refuse, so a quota is never given back.
        return { result: this.#quota(op, nowMs) };
    }
  }

  /** limits.lua's peek_* functions, on this store's state. */
  #peekOne(op: StoreOp, nowMs: number): PeekResult {
    switch (op.kind) {
      case 'sliding_log': {
        const log = this.#window(op.limiterId, op.perMs, nowMs);
        // A smoothed limit reads the allowance the request would meet, its smoothing step taken.
        const smoothing = op.smoothing ? clampSmoothing(op.smoothing, op.rate) : null;
        const allowance = smoothing ? smoothStep(this.#smoothingState(op.limiterId, smoothing, op.rate, nowMs), log.length, op.rate, smoothing, nowMs).allowance : op.rate;
        const resetEntry = log.length >= allowance ? readmittedAt(log, log.length + 1, allowance, nowMs) : (log[0] ?? nowMs);
        return peeked(log.length, allowance, resetEntry + op.perMs);
      }
      case 'sentinel': {
        const log = this.#window(op.limiterId, op.perMs, nowMs);
        const blockedUntil = this.#flags.get(op.limiterId, nowMs);
        if (blockedUntil !== undefined) return { count: log.length, limit: op.rate, remaining: 0, resetMs: blockedUntil };
        return peeked(log.length, op.rate, (log[0] ?? nowMs) + op.perMs);
      }
      case 'fixed_window': {
        const windowStart = Math.floor(nowMs / op.perMs) * op.perMs;
        return peeked(this.#counters.get(fixedWindowKey(op, windowStart), nowMs) ?? 0, op.rate, windowStart + op.perMs);
      }
      case 'quota': {
        const { balance, renews } = this.#quotaState(op, nowMs);
        return { count: Math.max(0, op.max - balance), limit: op.max, remaining: Math.max(0, balance), resetMs: renews };
      }
    }
  }

  /** The log of one limiter, trimmed to the window ending now. */
  #window(limiterId: string, perMs: number, nowMs: number): number[] {
    const log = this.#logs.get(limiterId, nowMs) ?? [];
    const cutoff = nowMs - perMs;
    let drop = 0;
    while (drop < log.length && log[drop]! <= cutoff) drop++;
    if (drop > 0) log.splice(0, drop);
    return log;
  }

  #append(limiterId: string, log: number[], op: { perMs: number }, nowMs: number): void {
    log.push(nowMs);
    if (log.length > 1 && log[log.length - 2]! > nowMs) log.sort((a, b) => a - b);
    this.#logs.set(limiterId, log, nowMs + op.perMs);
  }

  /** Removes one entry logged at `atMs` (entries of one time are interchangeable). */
  #unlog(limiterId: string, atMs: number): void {
    const log = this.#logs.get(limiterId, atMs);
    const at = log?.lastIndexOf(atMs) ?? -1;
    if (at >= 0) log!.splice(at, 1);
  }

  #sliding(op: Op<'sliding_log'>, nowMs: number): Ran {
    const log = this.#window(op.limiterId, op.perMs, nowMs);
    const count = log.length;
    this.#append(op.limiterId, log, op, nowMs);
    const smoothed = op.smoothing ? this.#smooth(op.limiterId, count, op, op.smoothing, nowMs) : null;
    const allowance = smoothed?.newAllowance ?? op.rate;
    const allowed = count < allowance;
    const resetMs = (allowed ? log[0]! : readmittedAt(log, log.length, allowance, nowMs)) + op.perMs;
    const changed = smoothed && smoothed.oldAllowance !== smoothed.newAllowance ? smoothed : null;
    return {
      result: { ...result(allowed, allowance, allowed ? allowance - count - 1 : 0, resetMs), smoothing: changed },
      undo: allowed ? () => this.#unlog(op.limiterId, nowMs) : undefined,
    };
  }

  #smooth(
    limiterId: string,
    requests: number,
    op: Op<'sliding_log'>,
    raw: CompiledSmoothing,
    nowMs: number,
  ): { oldAllowance: number; newAllowance: number } {
    const settings = clampSmoothing(raw, op.rate);
    const state = this.#smoothingState(limiterId, settings, op.rate, nowMs);
    const next = smoothStep(state, requests, op.rate, settings, nowMs);
    this.#smoothing.set(limiterId, next, nowMs + op.perMs * 2 + settings.delay * 1000 + 1000);
    return { oldAllowance: state.allowance, newAllowance: next.allowance };
  }

  /** A limiter's smoothing state before a request's step. An edit of the limit since puts the allowance back within its bounds, with no event (limits.lua `smoothed`). */
  #smoothingState(limiterId: string, settings: CompiledSmoothing, rate: number, nowMs: number): SmoothingState {
    const stored = this.#smoothing.get(limiterId, nowMs);
    return { allowance: withinBounds(stored?.allowance ?? settings.threshold, settings.threshold, rate), changedAt: stored?.changedAt ?? 0 };
  }

  /** The sliding log's variant: every request logged, refused ones too, and a flag that refuses at once for a window (limits.lua). */
  #sentinel(op: Op<'sentinel'>, nowMs: number): Ran {
    const log = this.#window(op.limiterId, op.perMs, nowMs);
    const count = log.length;
    this.#append(op.limiterId, log, op, nowMs);
    const flagExpiry = this.#flags.get(op.limiterId, nowMs);
    if (flagExpiry !== undefined) return { result: result(false, op.rate, 0, flagExpiry) };
    if (count >= op.rate) {
      this.#flags.set(op.limiterId, nowMs + op.perMs, nowMs + op.perMs);
      return { result: result(false, op.rate, 0, nowMs + op.perMs) };
    }
    // The flag was absent (checked above), so a flag set here is this request's own.
    const flagged = count + 1 >= op.rate;
    if (flagged) this.#flags.set(op.limiterId, nowMs + op.perMs, nowMs + op.perMs);
    const undo = (): void => {
      this.#unlog(op.limiterId, nowMs);
      if (flagged) this.#flags.delete(op.limiterId);
    };
    // Nothing passes before this request's own flag ends: that is its reset.
    return { result: result(true, op.rate, op.rate - count - 1, flagged ? nowMs + op.perMs : log[0]! + op.perMs), undo };
  }

  #fixed(op: Op<'fixed_window'>, nowMs: number): Ran {
    const windowStart = Math.floor(nowMs / op.perMs) * op.perMs;
    const key = fixedWindowKey(op, windowStart);
    const n = (this.#counters.get(key, nowMs) ?? 0) + 1;
    const windowEnd = windowStart + op.perMs;
    // A refusal is not counted, as in the Redis script.
    if (n > op.rate) return { result: result(false, op.rate, 0, windowEnd) };
    this.#counters.set(key, n, windowEnd);
    // Undone within the same synchronous run: the counter still holds n.
    const undo = (): void => this.#counters.set(key, n - 1, windowEnd);
    return { result: result(true, op.rate, op.rate - n, windowEnd), undo };
  }

  /** The quota's state as a request now finds it: renewed if its period has ended. */
  #quotaState(op: Op<'quota'>, nowMs: number): { balance: number; renews: number } {
    const state = this.#quotas.get(op.quotaId, nowMs);
    const renews = state?.renews ?? op.initRenewsMs;
    if (op.renewalMs > 0 && nowMs >= renews) return { balance: op.max, renews: nowMs + op.renewalMs };
    if (!state) return { balance: Math.max(0, Math.min(op.initRemaining, op.max)), renews };
    // What the period has used stays used when the max changes (a Policy edit), also across a
    // max lowered under the use and raised again.
    // max raised or lowered first: unchanged it is 0, so a balance near 2^53 is not rounded.
    return { balance: Math.min(state.balance + (op.max - state.max), op.max), renews };
  }

  #quota(op: Op<'quota'>, nowMs: number): StoreResult {
    const state = this.#quotaState(op, nowMs);
    const { renews } = state;
    let { balance } = state;
    const allowed = balance > 0;
    if (allowed) balance -= 1;
    this.#quotas.set(op.quotaId, { balance, renews, max: op.max }, op.renewalMs > 0 ? renews + op.renewalMs : Infinity);
    return result(allowed, op.max, Math.max(0, balance), renews);
  }

  #sweep(): void {
    const nowMs = this.#now();
    for (const map of [this.#logs, this.#flags, this.#smoothing, this.#counters, this.#quotas]) map.sweep(nowMs);
  }
}
