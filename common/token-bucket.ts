/** A plain token bucket: `burst` writes at once, then `perSecond` sustained. */
export class TokenBucket {
  readonly #burst: number;
  readonly #perSecond: number;
  #tokens: number;
  #last: number;

  constructor(burst: number, perSecond: number, now = Date.now()) {
    this.#burst = burst;
    this.#perSecond = perSecond;
    this.#tokens = burst;
    this.#last = now;
  }

  #refill(now: number): void {
    this.#tokens = Math.min(this.#burst, this.#tokens + ((now - this.#last) / 1000) * this.#perSecond);
    this.#last = now;
  }

  take(now = Date.now()): boolean {
    this.#refill(now);
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Milliseconds until one token is available. */
  waitMs(now = Date.now()): number {
    this.#refill(now);
    return this.#tokens >= 1 ? 0 : Math.ceil(((1 - this.#tokens) / this.#perSecond) * 1000);
  }
}
