import type { CompiledApi, CompiledStreamLimit } from '../../crds/compiled.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import { StreamRateLimitWaitError } from './errors.ts';
import { SlotLog } from './slot-log.ts';

/** How long a request may wait for a slot: `stream_rate_limit_max_wait_ms`, else the upstream timeout. */
export function streamMaxWaitMs(settings: GatewaySettings): number {
  return settings.stream_rate_limit_max_wait_ms ?? settings.upstream_timeout_ms;
}

/**
 * Where a request takes a slot of its API's stream rate-limit resource before its limits are
 * counted, and waits for it before its upstream call: `StreamLimiters` in one process, the
 * primary's limiters for the workers of one gateway (sidecar/workers/stream-slots.ts). `take`
 * rejects with StreamRateLimitWaitError when the slot is more than `maxWaitMs` away: the
 * request is then refused before any limit counts it.
 */
export interface StreamSlots {
  take(apiId: string, limit: CompiledStreamLimit, maxWaitMs: number): Promise<StreamSlot>;
  /**
   * The stream rate-limit resource of each API a config now serves, by api_id (an API without
   * one is absent): a changed resource applies to the callers waiting at once, and the callers
   * of a resource gone no longer wait.
   */
  configure(resources: readonly StreamResource[]): void;
}

/** A slot given to a request. */
export interface StreamSlot {
  /** Resolves when the slot comes; a caller that leaves meanwhile gives it back and gets the signal's reason. */
  wait(signal?: AbortSignal): Promise<void>;
  /** Gives the slot back unused: its request was refused (a rate limit, its quota) before its upstream call. */
  giveBack(): void;
}

/** A slot asked for by a caller that waits for it elsewhere (a worker, of the primary's limiters). */
export interface SlotRequest {
  apiId: string;
  limit: CompiledStreamLimit;
  maxWaitMs: number;
}

/**
 * A slot given (`startMs`, on Date.now()'s clock; `id` names it to `release` and in a
 * `SlotMove`), or refused because it would come `refusedWaitMs` from now.
 */
export type SlotReservation = { id: number; startMs: number } | { refusedWaitMs: number };

/** A slot given back by a caller that left before it came, or whose request a limit refused. */
export interface SlotRelease {
  apiId: string;
  id: number;
}

/** A waiting caller's slot came sooner (`startMs`): a caller ahead of it gave its own back, or the resource changed. */
export interface SlotMove {
  id: number;
  startMs: number;
}

/** An API's stream rate-limit resource. */
export interface StreamResource {
  apiId: string;
  limit: CompiledStreamLimit;
}

/** The stream rate-limit resources of the APIs a config serves, by api_id. */
export function streamResourcesOf(apis: readonly CompiledApi[]): StreamResource[] {
  return apis.flatMap((api) => (api.stream_limit === null ? [] : [{ apiId: api.api_id, limit: api.stream_limit }]));
}

/**
 * When a waiting caller's slot comes. It only ever comes sooner: `moveTo` brings it forward
 * and wakes the caller waiting on the old time.
 */
export class SlotTime {
  #startMs: number;
  #moved: (() => void) | undefined;

  constructor(startMs: number) {
    this.#startMs = startMs;
  }

  get startMs(): number {
    return this.#startMs;
  }

  moveTo(startMs: number): void {
    this.#startMs = startMs;
    const moved = this.#moved;
    this.#moved = undefined;
    moved?.();
  }

  /** Resolves at the next `moveTo`. */
  nextMove(): Promise<void> {
    return new Promise((resolve) => (this.#moved = resolve));
  }
}

/**
 * The waiting callers' slot times, on one timer: when it fires, every time that has come is
 * resolved in time order, and each time's callers in arrival order. So callers go on in the
 * order of their slots even when two slots are a millisecond apart (separate timers set at
 * different moments may fire in either order within one millisecond). A caller whose slot is
 * brought forward joins the callers of its new time, after them.
 */
export class SlotWait {
  readonly #now: () => number;
  /** A promise per slot time still to come, resolved when it comes. */
  readonly #due = new Map<number, { came: Promise<void>; resolve: () => void }>();
  /** The keys of `#due`, ascending: slots are mostly given in time order, so this mostly appends. */
  readonly #times: number[] = [];
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Infinity;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Resolves when the slot `time` names comes (at once when it has come). A caller that
   * leaves meanwhile gives it back with `release` and gets the signal's own reason, not a
   * generic AbortError.
   */
  async until(time: SlotTime, signal: AbortSignal | undefined, release: () => void): Promise<void> {
    for (;;) {
      const start = time.startMs;
      if (start <= this.#now() && !signal?.aborted) return;
      try {
        const came = await abortable(Promise.race([this.#cameOf(start).then(() => true), time.nextMove().then(() => false)]), signal);
        if (came) return;
      } catch (error) {
        release();
        signal?.throwIfAborted();
        throw error;
      }
    }
  }

  #cameOf(start: number): Promise<void> {
    let due = this.#due.get(start);
    if (due === undefined) {
      const { promise, resolve } = Promise.withResolvers<void>();
      due = { came: promise, resolve };
      this.#due.set(start, due);
      let at = this.#times.length;
      while (at > 0 && this.#times[at - 1]! > start) at -= 1;
      this.#times.splice(at, 0, start);
      if (start < this.#timerAt) this.#arm(start);
    }
    return due.came;
  }

  #arm(start: number): void {
    clearTimeout(this.#timer);
    this.#timerAt = start;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, start - this.#now()));
  }

  #fire(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    // Timers may fire a little early by Date.now()'s clock: a time not yet come waits for the next turn.
    const nowMs = this.#now();
    let come = 0;
    while (come < this.#times.length && this.#times[come]! <= nowMs) come += 1;
    for (const start of this.#times.splice(0, come)) {
      this.#due.get(start)?.resolve();
      this.#due.delete(start);
    }
    const next = this.#times[0];
    if (next !== undefined) this.#arm(next);
  }
}

/** A caller waiting for its slot: `owner` the worker it waits in (none in one process); `moved` tells it its slot came sooner. */
interface Waiter {
  startMs: number;
  owner: number | undefined;
  moved: ((move: SlotMove) => void) | undefined;
}

/** Names reservations, unique among the limiters that share it (one process's, or the primary's for all workers). */
export class ReservationIds {
  #last = 0;

  next(): number {
    this.#last += 1;
    return this.#last;
  }
}

/**
 * The stream rate-limit resource of one ApiDefinition (docs/behaviour.md#the-stream-rate-limit-resource):
 * a local limiter, `count` per `interval_ms`, shared by the gateway's requests to that API's
 * upstream when `proxy.rate_limit` names its label; not distributed.
 *
 * Callers wait their turn, first come first served: on arrival each is given the earliest
 * time that keeps every interval to `count` slots (no sooner than the slot given before it,
 * nor than an interval after the slot given `count` places before it), and waits until then.
 * A caller whose slot is further away than the wait bound is refused at once and takes no
 * slot. A slot given back (its caller left, or a limit refused its request) is taken out, and
 * every caller still waiting behind it comes as soon as that rule allows: they move up, and
 * the next newcomer finds the room. The last `count` slots given and every slot of the last
 * interval are kept for that rule (SlotLog), so a lengthened interval counts them too.
 */
export class StreamLimiter {
  #settings: CompiledStreamLimit;
  readonly #now: () => number;
  readonly #ids: ReservationIds;
  /** The slots still kept for the rule and those still to come, in the order given (so in time order). */
  readonly #slots = new SlotLog();
  /** The callers of the slots still to come, by slot id, in the order given. */
  readonly #waiters = new Map<number, Waiter>();
  readonly #wait: SlotWait;

  constructor(limit: CompiledStreamLimit, now: () => number = Date.now, ids = new ReservationIds()) {
    this.#settings = limit;
    this.#now = now;
    this.#ids = ids;
    this.#wait = new SlotWait(now);
  }

  get settings(): CompiledStreamLimit {
    return this.#settings;
  }

  /**
   * Changed settings, going on from the slots given: they count against the new `count` and
   * `interval`, so a change lets no new burst through (nor do workers that run two config
   * versions while a reload is under way, the primary then seeing the settings alternate
   * request by request). The callers waiting come as soon as the new settings allow, and never
   * later than they were told. The limiter changes in place: a caller waiting gives its slot
   * back to it, and must meet the settings of now.
   */
  change(limit: CompiledStreamLimit): void {
    this.#settings = limit;
    this.#bringForward(0, this.#now());
  }

  /**
   * Gives the caller the earliest slot the resource allows, unless it is more than `maxWaitMs`
   * away: then it is refused and takes nothing. `moved` hears of the slot coming sooner.
   */
  reserve(maxWaitMs: number, moved?: (move: SlotMove) => void, owner?: number): SlotReservation {
    const nowMs = this.#now();
    this.#forgetPast(nowMs);
    const startMs = this.#earliest(this.#slots.length, nowMs);
    const waitMs = startMs - nowMs;
    if (waitMs > maxWaitMs) return { refusedWaitMs: waitMs };
    const id = this.#ids.next();
    this.#slots.push(id, startMs);
    if (startMs > nowMs) this.#waiters.set(id, { startMs, owner, moved });
    return { id, startMs };
  }

  /** A slot given back: a caller that left before it came, or whose request a limit refused. */
  release(id: number): void {
    const at = this.#slots.indexOf(id);
    // Not found: forgotten, as it bounds no slot any more (#forgetPast).
    if (at < 0) return;
    this.#slots.removeAt(at);
    this.#waiters.delete(id);
    this.#bringForward(at, this.#now());
  }

  /** Gives back the slots still to come of the callers `owner` held: a worker that ended. */
  releaseWaitingOf(owner: number): void {
    const nowMs = this.#now();
    let from = this.#slots.length;
    for (const [id, waiter] of this.#waiters) {
      if (waiter.owner !== owner || waiter.startMs <= nowMs) continue;
      const at = this.#slots.indexOf(id);
      this.#slots.removeAt(at);
      this.#waiters.delete(id);
      from = Math.min(from, at);
    }
    this.#bringForward(from, nowMs);
  }

  /** The resource is gone from its API: every caller still waiting goes now. */
  releaseAll(): void {
    const nowMs = this.#now();
    for (const [id, waiter] of this.#waiters) if (waiter.startMs > nowMs) waiter.moved?.({ id, startMs: nowMs });
    this.#waiters.clear();
    this.#slots.clear();
  }

  /**
   * This caller's slot. Throws StreamRateLimitWaitError when it is more than `maxWaitMs` away;
   * a caller that leaves while waiting, or gives it back, lets it go as `release` says.
   */
  take(maxWaitMs: number): StreamSlot {
    const time = new SlotTime(0);
    const reservation = this.reserve(maxWaitMs, (move) => time.moveTo(move.startMs));
    if ('refusedWaitMs' in reservation) throw new StreamRateLimitWaitError(this.#settings.label, maxWaitMs, reservation.refusedWaitMs);
    time.moveTo(reservation.startMs);
    const release = (): void => this.release(reservation.id);
    return { wait: (signal) => this.#wait.until(time, signal, release), giveBack: release };
  }

  /** The earliest time the slot at `index` may come, given the slots before it. */
  #earliest(index: number, nowMs: number): number {
    let startMs = nowMs;
    const { count, interval_ms: intervalMs } = this.#settings;
    if (index > 0) startMs = Math.max(startMs, this.#slots.startAt(index - 1));
    if (index >= count) startMs = Math.max(startMs, this.#slots.startAt(index - count) + intervalMs);
    return startMs;
  }

  /** Brings each slot still to come, from `from` on, as far forward as the slots before it allow. */
  #bringForward(from: number, nowMs: number): void {
    for (let i = from; i < this.#slots.length; i += 1) {
      const startMs = this.#slots.startAt(i);
      if (startMs <= nowMs) continue;
      const earliest = this.#earliest(i, nowMs);
      if (earliest >= startMs) continue;
      this.#slots.setStart(i, earliest);
      const id = this.#slots.idAt(i);
      const waiter = this.#waiters.get(id);
      if (waiter === undefined) continue;
      waiter.startMs = earliest;
      waiter.moved?.({ id, startMs: earliest });
    }
  }

  /**
   * Forgets the slots given an interval ago or more but the last `count` (the rest bound no
   * later slot, unless the interval is lengthened: the last `count` are what it would count),
   * and the callers whose slot has come.
   */
  #forgetPast(nowMs: number): void {
    const { count, interval_ms: intervalMs } = this.#settings;
    let ended = 0;
    while (this.#slots.length - ended > count && this.#slots.startAt(ended) + intervalMs <= nowMs) ended += 1;
    if (ended > 0) this.#slots.dropFirst(ended);
    for (const [id, waiter] of this.#waiters) {
      if (waiter.startMs > nowMs) break;
      this.#waiters.delete(id);
    }
  }
}

/** `ready`, or the signal's reason as soon as the caller leaves (at once if it has left). */
function abortable<T>(ready: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return ready;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise((resolve, reject) => {
    const leave = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', leave, { once: true });
    ready.then((value) => {
      signal.removeEventListener('abort', leave);
      resolve(value);
    }, reject);
  });
}

/** One limiter per API, shared in process by every caller of that API. */
export class StreamLimiters implements StreamSlots {
  readonly #limiters = new Map<string, StreamLimiter>();
  readonly #now: () => number;
  readonly #ids = new ReservationIds();

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * The API's limiter with these settings: the one it has, changed if they differ (a renamed
   * label included, so a rename lets no new burst through either).
   */
  get(apiId: string, limit: CompiledStreamLimit): StreamLimiter {
    const limiter = this.#limiters.get(apiId);
    if (limiter === undefined) {
      const created = new StreamLimiter(limit, this.#now, this.#ids);
      this.#limiters.set(apiId, created);
      return created;
    }
    if (!sameLimit(limiter.settings, limit)) limiter.change(limit);
    return limiter;
  }

  take(apiId: string, limit: CompiledStreamLimit, maxWaitMs: number): Promise<StreamSlot> {
    try {
      return Promise.resolve(this.get(apiId, limit).take(maxWaitMs));
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  configure(resources: readonly StreamResource[]): void {
    const limits = new Map(resources.map(({ apiId, limit }) => [apiId, limit]));
    for (const [apiId, limiter] of this.#limiters) {
      const limit = limits.get(apiId);
      if (limit !== undefined) {
        this.get(apiId, limit);
        continue;
      }
      limiter.releaseAll();
      this.#limiters.delete(apiId);
    }
  }

  /**
   * A slot for a caller that waits for it elsewhere (a worker, `owner`, as the primary gives
   * them: sidecar/workers/stream-slots.ts), told through `moved` when it comes sooner.
   */
  reserve({ apiId, limit, maxWaitMs }: SlotRequest, moved?: (move: SlotMove) => void, owner?: number): SlotReservation {
    return this.get(apiId, limit).reserve(maxWaitMs, moved, owner);
  }

  release({ apiId, id }: SlotRelease): void {
    this.#limiters.get(apiId)?.release(id);
  }

  /** A worker ended: the slots still to come of its callers, who will not come, go to the callers behind them. */
  releaseWaitingOf(owner: number): void {
    for (const limiter of this.#limiters.values()) limiter.releaseWaitingOf(owner);
  }
}

function sameLimit(a: CompiledStreamLimit, b: CompiledStreamLimit): boolean {
  return a.label === b.label && a.count === b.count && a.interval_ms === b.interval_ms;
}
