/**
 * The soak's verdict: a quantity grows without bound when the least-squares line through
 * its samples over the last half of the run climbs faster than a set slope. The first
 * half is left out because caches, JIT and connection pools fill then and level off.
 */

export interface Sample {
  /** Seconds since the start of the run. */
  at: number;
  value: number;
}

/** Slope of the least-squares line through the samples, in units per minute (0 for fewer than two samples). */
export function slopePerMinute(samples: readonly Sample[]): number {
  const n = samples.length;
  if (n < 2) return 0;
  const meanAt = samples.reduce((sum, s) => sum + s.at, 0) / n;
  const meanValue = samples.reduce((sum, s) => sum + s.value, 0) / n;
  let covariance = 0;
  let variance = 0;
  for (const s of samples) {
    covariance += (s.at - meanAt) * (s.value - meanValue);
    variance += (s.at - meanAt) ** 2;
  }
  return variance === 0 ? 0 : (covariance / variance) * 60;
}

/**
 * The lowest value in each window of `windowSeconds`, placed at the window's start. A
 * garbage-collected heap saws between collections; its floor over a window long enough
 * to hold a full collection is the memory still in use, and that is what must not grow.
 */
export function floors(samples: readonly Sample[], windowSeconds: number): Sample[] {
  const byWindow = new Map<number, number>();
  for (const s of samples) {
    const window = Math.floor(s.at / windowSeconds) * windowSeconds;
    byWindow.set(window, Math.min(byWindow.get(window) ?? Number.POSITIVE_INFINITY, s.value));
  }
  return [...byWindow].map(([at, value]) => ({ at, value }));
}

export interface TrendLimit {
  name: string;
  unit: string;
  /** Largest slope (units per minute) over the last half that still counts as bounded. */
  maxPerMinute: number;
}

export interface TrendVerdict extends TrendLimit {
  perMinute: number;
  first: number;
  last: number;
  ok: boolean;
}

/** Judges one series: its slope over the samples taken in the last half of `durationSeconds`. */
export function judge(limit: TrendLimit, samples: readonly Sample[], durationSeconds: number): TrendVerdict {
  const lastHalf = samples.filter((s) => s.at >= durationSeconds / 2);
  const perMinute = slopePerMinute(lastHalf);
  return { ...limit, perMinute, first: samples[0]?.value ?? 0, last: samples.at(-1)?.value ?? 0, ok: perMinute <= limit.maxPerMinute };
}
