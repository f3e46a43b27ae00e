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

/** A slot given (`startMs`, on Date.now()'s clock), or refused because it would come `refusedWaitMs` from now. */
export type SlotReservation = { startMs: number } | { refusedWaitMs: number };

/** A slot given back by a caller that left before it came. */
export interface SlotRelease {
  apiId: string;
  limit: CompiledStreamLimit;
  startMs: number;
}

/**
 * The callers of one slot wait on one timer, so they go on in arrival order: timers of
 * different lengths set at different times may fire in either order at the same moment.
 */
export class SlotWait {
  readonly #now: () => number;
  #pending: { start: number; ready: Promise<void> } | undefined;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Resolves when the slot starting at `start` comes (at once when it has come). A caller that
   * leaves meanwhile gives it back with `release` and gets the signal's own reason, not a
   * generic AbortError.
   */
  async until(start: number, signal: AbortSignal | undefined, release: () => void): Promise<void> {
    if (start <= this.#now() && !signal?.aborted) return;
    if (this.#pending?.start !== start) this.#pending = { start, ready: this.#sleepUntil(start) };
    try {
      await abortable(this.#pending.ready, signal);
    } catch (error) {
      release();
      signal?.throwIfAborted();
      throw error;
    }
  }

  async #sleepUntil(start: number): Promise<void> {
    // Timers may fire a little early: wait until the slot's time has really come.
    for (let left = start - this.#now(); left > 0; left = start - this.#now()) await sleep(left);
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
 * wait bound is refused at once and takes no slot, so the callers behind it keep theirs.
 */
export class StreamLimiter {
  readonly label: string;
  readonly settings: CompiledStreamLimit;
  readonly #count: number;
  readonly #intervalMs: number;
  readonly #now: () => number;
  /** Start of the latest interval a slot was given in, and how many it has given. */
  #windowStart = Number.NEGATIVE_INFINITY;
  #given = 0;
  readonly #wait: SlotWait;

  constructor(limit: CompiledStreamLimit, now: () => number = Date.now) {
    this.label = limit.label;
    this.settings = limit;
    this.#count = limit.count;
    this.#intervalMs = limit.interval_ms;
    this.#now = now;
    this.#wait = new SlotWait(now);
  }

  /**
   * The resource with changed settings, going on from the slots this one has given: the new
   * `count` and `interval` apply to the slots still to give. Starting afresh instead would let
   * a whole new `count` through at each change, and while workers run two config versions
   * (a reload under way) the primary sees the settings alternate request by request.
   */
  changedTo(limit: CompiledStreamLimit): StreamLimiter {
    const next = new StreamLimiter(limit, this.#now);
    next.#windowStart = this.#windowStart;
    next.#given = this.#given;
    return next;
  }

  /**
   * Gives the caller the earliest slot not given yet, unless it is more than `maxWaitMs`
   * away: then it is refused and takes nothing.
   */
  reserve(maxWaitMs: number): SlotReservation {
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
    return { startMs: start };
  }

  /** A caller that left before its slot came gives it back: to the next caller, if it is still the latest one given. */
  release(startMs: number): void {
    if (this.#windowStart === startMs) this.#given -= 1;
  }

  /**
   * This caller's slot. Throws StreamRateLimitWaitError when it is more than `maxWaitMs` away;
   * a caller that leaves while waiting, or gives it back, lets it go as `release` says.
   */
  take(maxWaitMs: number): StreamSlot {
    const reservation = this.reserve(maxWaitMs);
    if ('refusedWaitMs' in reservation) throw new StreamRateLimitWaitError(this.label, maxWaitMs, reservation.refusedWaitMs);
    const release = (): void => this.release(reservation.startMs);
    return { wait: (signal) => this.#wait.until(reservation.startMs, signal, release), giveBack: release };
  }
}

/** `ready`, or the signal's reason as soon as the caller leaves (at once if it has left). */
function abortable(ready: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return ready;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise((resolve, reject) => {
    const leave = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', leave, { once: true });
    ready.then(() => {
      signal.removeEventListener('abort', leave);
      resolve();
    }, reject);
  });
}

/** One limiter per API and label, shared in process by every caller that names it. */
export class StreamLimiters implements StreamSlots {
  readonly #limiters = new Map<string, StreamLimiter>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  get(apiId: string, limit: CompiledStreamLimit): StreamLimiter {
    const id = `${apiId}\u0000${limit.label}`;
    const limiter = this.#limiters.get(id);
    if (limiter && limiter.settings.count === limit.count && limiter.settings.interval_ms === limit.interval_ms) return limiter;
    const current = limiter ? limiter.changedTo(limit) : new StreamLimiter(limit, this.#now);
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

  /** A slot for a caller that waits for it elsewhere (a worker, as the primary gives them: sidecar/workers/stream-slots.ts). */
  reserve({ apiId, limit, maxWaitMs }: SlotRequest): SlotReservation {
    return this.get(apiId, limit).reserve(maxWaitMs);
  }

  release({ apiId, limit, startMs }: SlotRelease): void {
    this.get(apiId, limit).release(startMs);
  }
}
