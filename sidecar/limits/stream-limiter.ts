import { setTimeout as sleep } from 'node:timers/promises';
import type { CompiledStreamLimit } from '../../crds/compiled.ts';
import { StreamRateLimitTimeoutError } from './errors.ts';

/**
 * The stream rate-limit resource (SPEC §2.7): a local limiter, `count` per `interval_ms`,
 * shared by every component of one pipeline that names its label; not distributed.
 */
export class StreamLimiter {
  readonly label: string;
  readonly settings: CompiledStreamLimit;
  readonly #count: number;
  readonly #intervalMs: number;
  readonly #now: () => number;
  #windowStart = 0;
  #used = 0;

  constructor(limit: CompiledStreamLimit, now: () => number = Date.now) {
    this.label = limit.label;
    this.settings = limit;
    this.#count = limit.count;
    this.#intervalMs = limit.interval_ms;
    this.#now = now;
  }

  /**
   * Resolves once a slot is taken. Waits for the next interval while the current one is
   * full; rejects with StreamRateLimitTimeoutError when the slot would come later than
   * `maxWaitMs`, and with the signal's reason when it is aborted.
   */
  async acquire(signal?: AbortSignal, maxWaitMs = 1000): Promise<void> {
    const deadline = this.#now() + maxWaitMs;
    for (;;) {
      signal?.throwIfAborted();
      const nowMs = this.#now();
      if (nowMs >= this.#windowStart + this.#intervalMs) {
        this.#windowStart = nowMs;
        this.#used = 0;
      }
      if (this.#used < this.#count) {
        this.#used += 1;
        return;
      }
      const nextWindow = this.#windowStart + this.#intervalMs;
      if (nextWindow > deadline) throw new StreamRateLimitTimeoutError(this.label, maxWaitMs);
      try {
        await sleep(nextWindow - nowMs, undefined, { signal });
      } catch (error) {
        // Surface the caller's own reason rather than a generic AbortError.
        signal?.throwIfAborted();
        throw error;
      }
    }
  }
}

/** One limiter per API and label, shared in process by every caller that names it. */
export class StreamLimiters {
  readonly #limiters = new Map<string, StreamLimiter>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  get(apiId: string, limit: CompiledStreamLimit): StreamLimiter {
    const id = `${apiId}\u0000${limit.label}`;
    let limiter = this.#limiters.get(id);
    // A config change to the resource starts a fresh limiter with the new settings.
    if (!limiter || limiter.settings.count !== limit.count || limiter.settings.interval_ms !== limit.interval_ms) {
      limiter = new StreamLimiter(limit, this.#now);
      this.#limiters.set(id, limiter);
    }
    return limiter;
  }
}
