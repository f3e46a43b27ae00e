/**
 * Says yes to one call in `every`, on average. The timing histograms on the request path use
 * it, so their cost stays a small fraction of a request's even on the cheapest path (README:
 * Benchmarks), while one request in eight still gives their quantiles; their `_count` is
 * then a count of samples.
 *
 * The gap to the next yes is drawn afresh each time, evenly from `every / 2` to
 * `3 × every / 2`: a fixed one-in-`every` falls on the same place of any traffic whose pattern
 * repeats with a period dividing `every` (one client alternating two APIs left one of them
 * with no timing at all), while a drawn gap moves over every place of such a pattern alike. A
 * call costs a decrement and a comparison, and only a yes draws a number.
 */
export class Sampler {
  readonly every: number;
  readonly #least: number;
  readonly #spread: number;
  #left: number;

  constructor(every: number) {
    this.every = every;
    this.#least = Math.max(1, Math.ceil(every / 2));
    // Gaps from least to least + spread - 1, whose mean is `every`.
    this.#spread = 2 * (every - this.#least) + 1;
    this.#left = this.#gap();
  }

  next(): boolean {
    if (--this.#left > 0) return false;
    this.#left = this.#gap();
    return true;
  }

  #gap(): number {
    return this.#least + Math.floor(Math.random() * this.#spread);
  }
}

/** How many requests (or limit-store calls) stand behind one timing sample, on average. */
export const TIMING_SAMPLE_EVERY = 8;
