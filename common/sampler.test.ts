import { describe, expect, it } from 'vitest';
import { Sampler } from './sampler.ts';

describe('Sampler', () => {
  it('says yes to one call in every on average, never sooner than every / 2 nor later than 3 × every / 2', () => {
    const sampler = new Sampler(8);
    const yeses: number[] = [];
    for (let call = 1; call <= 80_000; call++) if (sampler.next()) yeses.push(call);
    expect(yeses.length).toBeGreaterThan(9_500);
    expect(yeses.length).toBeLessThan(10_500);
    const gaps = yeses.map((call, i) => call - (yeses[i - 1] ?? 0));
    expect(Math.min(...gaps)).toBe(4);
    expect(Math.max(...gaps)).toBe(12);
  });

  it('times each of two APIs a client alternates between, and each place of a pattern of eight', () => {
    for (const period of [2, 4, 8]) {
      const sampler = new Sampler(8);
      const samples = new Array<number>(period).fill(0);
      for (let call = 0; call < 2000 * period; call++) if (sampler.next()) samples[call % period]! += 1;
      // 250 samples per place on average: each place gets its share.
      for (const count of samples) expect(count).toBeGreaterThan(150);
    }
  });

  it('says yes to every call of a sampler of one', () => {
    const sampler = new Sampler(1);
    expect(Array.from({ length: 5 }, () => sampler.next())).toEqual([true, true, true, true, true]);
  });
});
