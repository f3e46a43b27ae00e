import { describe, expect, it } from 'vitest';
import { medianCpuRatio, medianRatio, type Measured, type Rounds } from './http-load.ts';

/** One closed-loop round's figures as the bench keeps them: its rate and the proxy's CPU µs per request. */
const round = (rate: number, proxyMicros: number): Measured => ({
  answered: rate,
  rate,
  latencyMicros: { p50: 1, p99: 2, p99_9: 3, max: 4 },
  non2xx: 0,
  errors: 0,
  maxSendLagMicros: 0,
  nice: 0,
  wakeLateMicros: { p50: 1, p99: 2, p99_9: 3, max: 4 },
  wakes: rate,
  meterNice: 0,
  cpuMicrosPerRequest: { proxy: proxyMicros },
});

describe('ratios taken within each round', () => {
  const rounds: Rounds = new Map([
    ['bare', [round(1000, 30), round(500, 40), round(1000, 30)]],
    ['row', [round(900, 40), round(480, 40), round(800, 50)]],
  ]);

  it('req/s: the median of the row over its baseline, round by round', () => {
    expect(medianRatio(rounds, 'row', 'bare')).toBeCloseTo(0.9);
  });

  it("CPU: the median of the baseline's CPU per request over the row's, round by round", () => {
    // Rounds: 30/40 = 0.75, 40/40 = 1, 30/50 = 0.6.
    expect(medianCpuRatio(rounds, 'row', 'bare', 'proxy')).toBeCloseTo(0.75);
  });
});
