import { describe, expect, it } from 'vitest';
import { cpuRatioOverRounds, ratioOverRounds, type Measured, type Rounds } from './http-load.ts';

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

  it('req/s: the median of the row over its baseline, round by round, and its lowest and highest round', () => {
    // Rounds: 900/1000 = 0.9, 480/500 = 0.96, 800/1000 = 0.8.
    const { ratio, spread } = ratioOverRounds(rounds, 'row', 'bare');
    expect(ratio).toBeCloseTo(0.9);
    expect(spread.low).toBeCloseTo(0.8);
    expect(spread.high).toBeCloseTo(0.96);
    expect(spread.rounds).toBe(3);
  });

  it("CPU: the median of the baseline's CPU per request over the row's, round by round", () => {
    // Rounds: 30/40 = 0.75, 40/40 = 1, 30/50 = 0.6.
    const { ratio, spread } = cpuRatioOverRounds(rounds, 'row', 'bare', 'proxy');
    expect(ratio).toBeCloseTo(0.75);
    expect([spread.low, spread.high]).toEqual([0.6, 1]);
  });
});
