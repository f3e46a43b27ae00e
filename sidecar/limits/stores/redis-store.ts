import type { Cluster, Redis } from 'ioredis';
import { defaultGatewaySettings, type GatewaySettings } from '../../../crds/settings.ts';
import { limiterKey, quotaKey } from '../../../common/redis-keys.ts';
import type { StoreReporter } from '../store-health.ts';
import { clampSmoothing, type LimitStore, type PeekResult, type StoreOp, type StoreResult } from './store.ts';
import { withTimeout } from './with-timeout.ts';
import { ConnectionWatch } from '../../../common/redis-connection.ts';
import { StoreDisconnectedError } from '../errors.ts';
import { LimitsScript, type LimitScriptReporter, type PackedReply, type ScriptArgument } from './limits-script.ts';

const trimDelayMs = 50;
/**
 * Added to a call's deadline (#call) where the last reply may have come from another server
 * than the next call's (a Cluster's nodes, a Sentinel set's masters), whose clocks differ a
 * little. One server has one clock, and the deadline's only error is how late the last reply's
 * time reached this process: at most that reply's round trip, which is the slack there. A call
 * that runs after its requests were answered is still counted if it runs within the slack of
 * its deadline; stalls longer than that are what the deadline is for.
 */
const OTHER_CLOCKS_SLACK_MS = 1_000;

/**
 * limits.lua's numbers: Redis's time (Unix ms), then per request its row count and rows (or -1
 * and its error's place among the messages).
 */
type Reply = number[];
/** Keys of one op; on a Cluster every script call runs exactly one op. */
const keysPerOp = 2;
/** Integers per result row in the reply. */
const rowLength = 6;
/**
 * Decisions one script call carries at most: enough to take a busy moment's decisions
 * together, few enough that the call holds Redis for well under a millisecond.
 */
const maxBatch = 64;

interface Encoded {
  keys: [string, string];
  /** The op's kind and fields, packed as limits.lua reads them (`packOp`). */
  packed: Buffer;
}

/**
 * How limits.lua runs a request's ops: counting them (`admit`), counting them for a request
 * a limit outside Redis already refused (`refused`), or reading them (`peek`).
 */
type Mode = 'admit' | 'refused' | 'peek';
const modeArgument: Record<Mode, string> = { admit: '0', refused: '1', peek: 'p' };

/** One request's part of a script call. */
interface Call {
  encoded: readonly Encoded[];
  member: string;
  mode: Mode;
}

/** What one request's ops did: Redis's time during the call and their rows. */
interface Ran {
  nowMs: number;
  reply: Reply;
  /** Where each row starts in `reply`. */
  rows: number[];
}

/** A request's decision waiting for the next batched call. */
interface Queued extends Call {
  ops: readonly StoreOp[];
  resolve: (results: StoreResult[]) => void;
  reject: (error: unknown) => void;
}

/** The ops' encodings are the same for every request meeting the same limit, so they are made once per op object. */
const encodings = new WeakMap<StoreOp, Encoded>();

function encodeOnce(op: StoreOp): Encoded {
  // A quota's op carries the session's seed of the moment: built for one request only.
  if (op.kind === 'quota') return encodeOp(op);
  let encoded = encodings.get(op);
  if (encoded === undefined) {
    encoded = encodeOp(op);
    encodings.set(op, encoded);
  }
  return encoded;
}

/** An op's kind as limits.lua's `kinds` lists them: upper case runs a limit, lower case undoes one. */
export const kindCodes = { L: 1, S: 2, F: 3, Q: 4, l: 5, s: 6, f: 7 } as const;
const fieldsPerOp = 6;

/**
 * One ARGV per op: its kind's code, then its fields in the order limits.lua lists them above
 * `kinds` (0 where a kind has fewer), as little-endian doubles: exact for every integer below
 * 2^53, and Lua reads them in one call instead of parsing seven strings.
 */
function packOp(kind: keyof typeof kindCodes, ...fields: number[]): Buffer {
  const packed = Buffer.allocUnsafe(8 * (1 + fieldsPerOp));
  packed.writeDoubleLE(kindCodes[kind], 0);
  for (let i = 0; i < fieldsPerOp; i++) packed.writeDoubleLE(fields[i] ?? 0, 8 * (1 + i));
  return packed;
}

function encodeOp(op: StoreOp): Encoded {
  switch (op.kind) {
    case 'sliding_log': {
      const s = op.smoothing ? clampSmoothing(op.smoothing, op.rate) : null;
      return {
        keys: [limiterKey(op.limiterId, 'log'), limiterKey(op.limiterId, 'smooth')],
        packed: packOp('L', op.rate, op.perMs, s?.threshold ?? 0, s?.step ?? 0, s?.trigger ?? 0, (s?.delay ?? 0) * 1000),
      };
    }
    case 'sentinel':
      return { keys: [limiterKey(op.limiterId, 'log'), limiterKey(op.limiterId, 'sentinel')], packed: packOp('S', op.rate, op.perMs) };
    case 'fixed_window': {
      // The script names the window (`fw:<per>:<start>`) from Redis's time.
      const key = limiterKey(op.limiterId, `fw:${op.perMs}`);
      return { keys: [key, key], packed: packOp('F', op.rate, op.perMs) };
    }
    case 'quota': {
      const key = quotaKey(op.quotaId);
      return { keys: [key, key], packed: packOp('Q', op.max, op.renewalMs, op.initRemaining, op.initRenewsMs) };
    }
  }
}

/**
 * On a Cluster, the call that undoes what `op` did when it ran alone in its own call (as
 * the call's first op, so its log entry is `<member>:1`); null when there is nothing to
 * undo. The sliding log and the sentinel logged the request either way (a level after the
 * refusing one would not have run on one server); a sentinel that admitted it set the block
 * flag itself when no allowance was left (remaining 0); a fixed window counted it only when
 * it admitted it, in the window its reset ends.
 */
function encodeUndo(op: StoreOp, result: StoreResult): Encoded | null {
  switch (op.kind) {
    case 'sliding_log':
      return { keys: encodeOnce(op).keys, packed: packOp('l', 1) };
    case 'sentinel':
      return { keys: encodeOnce(op).keys, packed: packOp('s', 1, result.allowed && result.remaining === 0 ? 1 : 0) };
    case 'fixed_window':
      return result.allowed ? { keys: encodeOnce(op).keys, packed: packOp('f', result.resetMs - op.perMs) } : null;
    case 'quota':
      return null;
  }
}

/** A peek's row: would-admit, limit, remaining, reset, count. */
const toPeekResult = (reply: Reply, at: number): PeekResult => ({
  count: reply[at + 4]!,
  limit: reply[at + 1]!,
  remaining: reply[at + 2]!,
  resetMs: reply[at + 3]!,
});

function toResult(reply: Reply, at: number): StoreResult {
  const oldAllowance = reply[at + 4]!;
  const newAllowance = reply[at + 5]!;
  return {
    allowed: reply[at] === 1,
    limit: reply[at + 1]!,
    remaining: reply[at + 2]!,
    resetMs: reply[at + 3]!,
    smoothing: oldAllowance !== newAllowance ? { oldAllowance, newAllowance } : null,
  };
}

/** KEYS and ARGV of one script call carrying `calls`, in limits.lua's layout. */
function scriptArguments(calls: readonly Call[], resets: boolean, clockMs: number | '', deadlineMs: number): { keys: string[]; args: ScriptArgument[] } {
  const keys: string[] = [];
  const args: ScriptArgument[] = [clockMs, deadlineMs];
  for (const { encoded, member, mode } of calls) {
    args.push(member, modeArgument[mode], resets ? 1 : 0, encoded.length);
    for (const e of encoded) {
      keys.push(e.keys[0], e.keys[1]);
      args.push(e.packed);
    }
  }
  return { keys, args };
}

const resultsOf = ({ reply, rows }: Ran): StoreResult[] => rows.map((at) => toResult(reply, at));

/** The packed numbers of limits.lua's reply (little-endian doubles). */
function unpackNumbers(packed: Buffer): Reply {
  const numbers = new Array<number>(packed.length / 8);
  for (let i = 0; i < numbers.length; i++) numbers[i] = packed.readDoubleLE(i * 8);
  return numbers;
}

/** Each call's part of the reply, in order: its results, or the error its commands raised; and Redis's time. */
function splitReply([packed, ...messages]: PackedReply, count: number): { nowMs: number; ran: (Ran | Error)[] } {
  const reply = unpackNumbers(packed);
  const nowMs = reply[0]!;
  const out: (Ran | Error)[] = [];
  let at = 1;
  for (let c = 0; c < count; c++) {
    const rows = reply[at++]!;
    if (rows < 0) {
      out.push(new Error(messages[reply[at++]! - 1]?.toString() ?? 'script error'));
      continue;
    }
    const starts: number[] = [];
    for (let r = 0; r < rows; r++, at += rowLength) starts.push(at);
    out.push({ nowMs, reply, rows: starts });
  }
  return { nowMs, ran: out };
}

/**
 * Shared state in Redis: one call of limits.lua per decision (a Redis Function, or EVALSHA
 * where the server has none: limits-script.ts), so a request pays
 * one round trip for every limit it meets, refunds included (a Cluster is the
 * exception, see `#runOnCluster`). Decisions that come due while the event loop handles
 * one batch of I/O share one call (at most `maxBatch`): each still runs alone and in
 * order inside it, and Redis and the gateway pay a call's fixed cost once for all of them.
 * Every time a limiter reads is Redis's own clock.
 */
export interface RedisLimitStoreOptions {
  /** Names this gateway's log entries, so that its refunds remove only its own. */
  instanceId: string;
  /**
   * Failures of the writes no request waits for (sentinel trims, a Cluster's refunds), and
   * how the limit script runs (a function, or by EVALSHA).
   */
  reporter: StoreReporter & LimitScriptReporter;
  /**
   * Replaces Redis's clock. Only the store conformance suite sets it, to run the same
   * cases on both stores with one manual clock; gateways must share Redis's.
   */
  clock?: () => number;
}

export class RedisLimitStore implements LimitStore {
  readonly #redis: Redis | Cluster;
  readonly #script: LimitsScript;
  readonly #instanceId: string;
  readonly #clock: (() => number) | undefined;
  readonly #onBackgroundError: (error: unknown) => void;
  #settings: GatewaySettings = defaultGatewaySettings;
  #sequence = 0;
  #queue: Queued[] = [];
  #flushScheduled = false;
  /** Sentinel logs to trim: log key -> window and Redis's time at the latest decision. */
  readonly #pendingTrims = new Map<string, { perMs: number; nowMs: number }>();
  #trimTimer: NodeJS.Timeout | undefined;
  readonly #connection: ConnectionWatch;
  /**
   * Redis's clock less this process's, as the last reply showed it (less half its round trip,
   * which only brings a deadline sooner); null before the first reply.
   */
  #redisClockOffsetMs: number | null = null;
  /** The last reply's round trip, in ms: how far that offset may lag behind Redis's clock. */
  #lastRoundTripMs = 0;
  /** Whether every call reaches one server, so one clock (not a Cluster, not behind Sentinel). */
  readonly #oneServer: boolean;

  constructor(redis: Redis | Cluster, options: RedisLimitStoreOptions) {
    this.#redis = redis;
    this.#oneServer = !redis.isCluster && !((redis as Redis).options.sentinels?.length ?? 0);
    this.#connection = new ConnectionWatch(redis);
    this.#instanceId = options.instanceId;
    this.#clock = options.clock;
    this.#onBackgroundError = (error) => options.reporter.failed(error);
    // On a Cluster every call runs one op.
    this.#script = new LimitsScript(redis, options.reporter, keysPerOp);
  }

  configure(settings: GatewaySettings): void {
    this.#settings = settings;
  }

  /**
   * One promise per decision, settled by the batch's callback with the results themselves:
   * every limited request passes here, and each async step in between was a promise, a
   * microtask and a closure more (docs/architecture.md#performance).
   */
  run(ops: readonly StoreOp[], refused: boolean): Promise<StoreResult[]> {
    const member = `${this.#instanceId}:${(this.#sequence = (this.#sequence + 1) % Number.MAX_SAFE_INTEGER)}`;
    if (this.#redis.isCluster) return this.#runOnCluster(ops, refused, member);
    return new Promise<StoreResult[]>((resolve, reject) => {
      this.#queue.push({ ops, encoded: ops.map(encodeOnce), member, mode: refused ? 'refused' : 'admit', resolve, reject });
      if (this.#flushScheduled) return;
      this.#flushScheduled = true;
      // After the I/O callbacks of this loop turn: every decision they started goes in one call.
      setImmediate(this.#flush);
    });
  }

  /** A queued decision's results, once its call answered; its sentinel logs join the next trim. */
  #settle({ ops, resolve }: Queued, ran: Ran): void {
    const results = resultsOf(ran);
    this.#trimSentinelLogs(ops, results.length, ran.nowMs);
    resolve(results);
  }

  /** One call, outside the batches: peeks are rare (an admin read), and on a Cluster each op is its own call. */
  async peek(ops: readonly StoreOp[]): Promise<PeekResult[]> {
    const calls = this.#redis.isCluster ? ops.map((op) => [op]) : [ops];
    const ran = await Promise.all(calls.map((group) => this.#eval(group.map(encodeOnce), '', 'peek')));
    return ran.flatMap(({ reply, rows }) => rows.map((at) => toPeekResult(reply, at)));
  }

  async close(): Promise<void> {
    // The client belongs to the caller; pending trims go out now, best effort.
    clearTimeout(this.#trimTimer);
    if (this.#pendingTrims.size > 0) this.#flushTrims();
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const queue = this.#queue;
    this.#queue = [];
    for (let i = 0; i < queue.length; i += maxBatch) {
      const batch = queue.slice(i, i + maxBatch);
      this.#call(batch, true).then(
        (ran) => ran.forEach((r, j) => (r instanceof Error ? batch[j]!.reject(r) : this.#settle(batch[j]!, r))),
        (error: unknown) => batch.forEach((q) => q.reject(error)),
      );
    }
  };

  /**
   * One script call carrying `calls`; each gets its results or its own error. A call that
   * counts (`expires`) carries a deadline on Redis's clock, the moment this process stops
   * waiting for it: a Redis that stalls (a long command, a paused process) runs the call when
   * it wakes, after its requests were answered without it, and the script then counts nothing
   * (limits.lua). Undos and peeks change nothing a late run could get wrong.
   */
  async #call(calls: readonly Call[], expires: boolean): Promise<(Ran | Error)[]> {
    // Sent while a lost connection is down, a call waits in the client's queue and runs when it
    // is back: long after its request was answered, it would count that request all the same.
    const lost = this.#connection.lost();
    if (lost !== undefined) throw new StoreDisconnectedError(lost);
    const timeoutMs = this.#settings.redis_timeout_ms;
    const offset = this.#redisClockOffsetMs;
    const sentMs = Date.now();
    const slackMs = this.#oneServer ? this.#lastRoundTripMs + 1 : OTHER_CLOCKS_SLACK_MS;
    const deadlineMs = expires && offset !== null && this.#clock === undefined ? Math.floor(sentMs + offset + timeoutMs + slackMs) : 0;
    const { keys, args } = scriptArguments(calls, this.#settings.rate_limit_response_headers === 'rate_limits', this.#clock?.() ?? '', deadlineMs);
    const { nowMs, ran } = splitReply(await withTimeout(this.#script.call(keys, args), timeoutMs), calls.length);
    const receivedMs = Date.now();
    this.#redisClockOffsetMs = nowMs - receivedMs;
    this.#lastRoundTripMs = receivedMs - sentMs;
    return ran;
  }

  /** One request's ops alone in one call (a Cluster's calls each stay in one slot). */
  async #eval(encoded: readonly Encoded[], member: string, mode: Mode, expires = mode !== 'peek'): Promise<Ran> {
    const [ran] = await this.#call([{ encoded, member, mode }], expires);
    if (ran instanceof Error) throw ran;
    return ran!;
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
    const ran = await Promise.all(rateOps.map((op) => this.#eval([encodeOnce(op)], member, 'admit')));
    rateOps.forEach((op, i) => this.#trimSentinelLogs([op], 1, ran[i]!.nowMs));
    const results = ran.map((one) => resultsOf(one)[0]!);
    const refusedAt = results.findIndex((r) => !r.allowed);
    if (refused || refusedAt >= 0) {
      await this.#undoOnCluster(rateOps, results, refusedAt, member);
      return refusedAt >= 0 ? results.slice(0, refusedAt + 1) : results;
    }
    if (quotaOps.length === 0) return results;
    const quota = resultsOf(await this.#eval(quotaOps.map(encodeOnce), member, 'admit'));
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
    await Promise.all(undos.map((undo) => this.#eval([undo], member, 'admit', false))).catch(this.#onBackgroundError);
  }

  /**
   * The sentinel's log writes happen off the request path: logs touched by decisions are
   * trimmed together every `trimDelayMs`, in a MULTI, or a plain pipeline with
   * enable_non_transactional_rate_limiter. One batch per flush on standalone Redis; one
   * per log on a Cluster, where a batch must stay in one slot. Only the first `ran` ops ran
   * (the store stops at the first refusal).
   */
  #trimSentinelLogs(ops: readonly StoreOp[], ran: number, nowMs: number): void {
    for (let i = 0; i < ran; i++) {
      const op = ops[i]!;
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
      // The script gives the log its expiry with each entry (limits.lua): the trim only trims.
      for (const [log, { perMs, nowMs }] of group) batch.zremrangebyscore(log, '-inf', nowMs - perMs);
      batch.exec().catch(this.#onBackgroundError);
    }
  }
}
