import { setTimeout as sleep } from 'node:timers/promises';
import type { CompiledStreamLimit } from '../../crds/compiled.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import { StreamRateLimitWaitError } from './errors.ts';

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
  limit: CompiledStreamLimit;
  id: number;
  startMs: number;
}

/** A waiting caller's slot came sooner (`startMs`): a caller ahead of it gave its own back. */
export interface SlotMove {
  id: number;
  startMs: number;
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
 * The callers of one slot wait on one timer, so they go on in arrival order: timers of
 * different lengths set at different times may fire in either order at the same moment. A
 * caller whose slot is brought forward joins the callers of its new time, after them.
 */
export class SlotWait {
  readonly #now: () => number;
  readonly #timers = new Map<number, Promise<void>>();

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
        const came = await abortable(Promise.race([this.#timerOf(start).then(() => true), time.nextMove().then(() => false)]), signal);
        if (came) return;
      } catch (error) {
        release();
        signal?.throwIfAborted();
        throw error;
      }
    }
  }

  #timerOf(start: number): Promise<void> {
    let timer = this.#timers.get(start);
    if (timer === undefined) {
      timer = this.#sleepUntil(start).finally(() => this.#timers.delete(start));
      this.#timers.set(start, timer);
    }
    return timer;
  }

  async #sleepUntil(start: number): Promise<void> {
    // Timers may fire a little early: wait until the slot's time has really come.
    for (let left = start - this.#now(); left > 0; left = start - this.#now()) await sleep(left);
  }
}

/** A caller waiting for a slot still to come: told, through `moved`, when it comes sooner. */
interface Waiting {
  id: number;
  startMs: number;
  moved: (move: SlotMove) => void;
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
 * The stream rate-limit resource (docs/behaviour.md#the-stream-rate-limit-resource): a local limiter, `count` per `interval_ms`,
 * of one ApiDefinition (its pipeline), shared by the gateway's requests to that API's
 * upstream when `proxy.rate_limit` names its label; not distributed.
 *
 * Callers wait their turn, first come first served: on arrival each is given the earliest
 * slot not given yet (`count` per interval; while callers queue, intervals follow each
 * other back to back), and waits until then. A caller whose slot is further away than the
 * wait bound is refused at once and takes no slot, so the callers behind it keep theirs. A
 * slot given back (its caller left, or a limit refused its request) goes to the first caller
 * waiting for a later one, whose own slot goes the same way, and so on: every caller behind
 * moves up one place, and the last slot given is free again.
 */
export class StreamLimiter {
  readonly label: string;
  readonly settings: CompiledStreamLimit;
  readonly #count: number;
  readonly #intervalMs: number;
  readonly #now: () => number;
  readonly #ids: ReservationIds;
  /** Start of the latest interval a slot was given in, and how many it has given. */
  #windowStart = Number.NEGATIVE_INFINITY;
  #given = 0;
  /** Callers whose slot had not come when it was given, in arrival order (so in slot order). */
  #waiting: Waiting[] = [];
  readonly #wait: SlotWait;

  constructor(limit: CompiledStreamLimit, now: () => number = Date.now, ids = new ReservationIds()) {
    this.label = limit.label;
    this.settings = limit;
    this.#count = limit.count;
    this.#intervalMs = limit.interval_ms;
    this.#now = now;
    this.#ids = ids;
    this.#wait = new SlotWait(now);
  }

  /**
   * The resource with changed settings, going on from the slots this one has given: the new
   * `count` and `interval` apply to the slots still to give. Starting afresh instead would let
   * a whole new `count` through at each change, and while workers run two config versions
   * (a reload under way) the primary sees the settings alternate request by request.
   */
  changedTo(limit: CompiledStreamLimit): StreamLimiter {
    const next = new StreamLimiter(limit, this.#now, this.#ids);
    next.#windowStart = this.#windowStart;
    next.#given = this.#given;
    next.#waiting = this.#waiting;
    return next;
  }

  /**
   * Gives the caller the earliest slot not given yet, unless it is more than `maxWaitMs`
   * away: then it is refused and takes nothing. `moved` hears of the slot coming sooner.
   */
  reserve(maxWaitMs: number, moved: (move: SlotMove) => void = () => undefined): SlotReservation {
    const nowMs = this.#now();
    let start = this.#windowStart;
    let given = this.#given;
    if (nowMs >= start + this.#intervalMs) {
      start = nowMs;
      given = 0;
    } else if (given >= this.#count) {
      start += this.#intervalMs;
      given = 0;
    }
    const waitMs = Math.max(0, start - nowMs);
    if (waitMs > maxWaitMs) return { refusedWaitMs: waitMs };
    this.#windowStart = start;
    this.#given = given + 1;
    const id = this.#ids.next();
    if (start > nowMs) this.#waiting.push({ id, startMs: start, moved });
    return { id, startMs: start };
  }

  /**
   * A slot given back: a caller that left before it came, or whose request a limit refused.
   * The first caller waiting for a later slot takes it, and so on down the queue; the last
   * slot freed goes back to its interval, if it is still the latest one given.
   */
  release(id: number, startMs: number): void {
    const nowMs = this.#now();
    // Callers whose slot has come are waiting no more.
    while (this.#waiting.length > 0 && this.#waiting[0]!.startMs <= nowMs) this.#waiting.shift();
    const at = this.#waiting.findIndex((waiting) => waiting.id === id);
    if (at >= 0) this.#waiting.splice(at, 1);
    // A slot of an interval that has ended is of use to nobody.
    if (startMs + this.#intervalMs <= nowMs) return;
    let free = startMs;
    for (const waiting of this.#waiting) {
      if (waiting.startMs <= free) continue;
      const later = waiting.startMs;
      waiting.startMs = free;
      waiting.moved({ id: waiting.id, startMs: free });
      free = later;
    }
    if (free === this.#windowStart) this.#given -= 1;
  }

  /**
   * This caller's slot. Throws StreamRateLimitWaitError when it is more than `maxWaitMs` away;
   * a caller that leaves while waiting, or gives it back, lets it go as `release` says.
   */
  take(maxWaitMs: number): StreamSlot {
    const time = new SlotTime(0);
    const reservation = this.reserve(maxWaitMs, (move) => time.moveTo(move.startMs));
    if ('refusedWaitMs' in reservation) throw new StreamRateLimitWaitError(this.label, maxWaitMs, reservation.refusedWaitMs);
    time.moveTo(reservation.startMs);
    const release = (): void => this.release(reservation.id, time.startMs);
    return { wait: (signal) => this.#wait.until(time, signal, release), giveBack: release };
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

/** One limiter per API and label, shared in process by every caller that names it. */
export class StreamLimiters implements StreamSlots {
  readonly #limiters = new Map<string, StreamLimiter>();
  readonly #now: () => number;
  readonly #ids = new ReservationIds();

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  get(apiId: string, limit: CompiledStreamLimit): StreamLimiter {
    const id = `${apiId}\u0000${limit.label}`;
    const limiter = this.#limiters.get(id);
    if (limiter && limiter.settings.count === limit.count && limiter.settings.interval_ms === limit.interval_ms) return limiter;
    const current = limiter ? limiter.changedTo(limit) : new StreamLimiter(limit, this.#now, this.#ids);
    this.#limiters.set(id, current);
    return current;
  }

  take(apiId: string, limit: CompiledStreamLimit, maxWaitMs: number): Promise<StreamSlot> {
    try {
      return Promise.resolve(this.get(apiId, limit).take(maxWaitMs));
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /**
   * A slot for a caller that waits for it elsewhere (a worker, as the primary gives them:
   * sidecar/workers/stream-slots.ts), told through `moved` when it comes sooner.
   */
  reserve({ apiId, limit, maxWaitMs }: SlotRequest, moved?: (move: SlotMove) => void): SlotReservation {
    return this.get(apiId, limit).reserve(maxWaitMs, moved);
  }

  release({ apiId, limit, id, startMs }: SlotRelease): void {
    this.get(apiId, limit).release(id, startMs);
  }
}
