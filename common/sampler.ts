/**
 * Says yes to one call in `every`. The timing histograms on the request path use it, so
 * their cost stays a small fraction of a request's even on the cheapest path (README:
 * Benchmarks), while one request in eight still gives their quantiles; their `_count` is
 * then a count of samples.
 */
export class Sampler {
  readonly every: number;
  #calls = 0;

  constructor(every: number) {
    this.every = every;
  }

  next(): boolean {
    this.#calls = (this.#calls + 1) % this.every;
    return this.#calls === 0;
  }
}

/** How many requests (or limit-store calls) stand behind one timing sample. */
export const TIMING_SAMPLE_EVERY = 8;
