import { describe, expect, it } from 'vitest';
import { gatewaySettingsSchema } from '../../crds/settings.ts';
import { algorithmFor, algorithmMode, drlShare } from './algorithm.ts';

describe('algorithmMode', () => {
  it.each([
    [{}, 'drl'],
    [{ enable_redis_rolling_limiter: true }, 'sliding_log'],
    [{ enable_sentinel_rate_limiter: true }, 'sentinel'],
    [{ enable_fixed_window_rate_limiter: true }, 'fixed_window'],
    [{ enable_redis_rolling_limiter: true, enable_sentinel_rate_limiter: true }, 'sentinel'],
    [{ enable_sentinel_rate_limiter: true, enable_fixed_window_rate_limiter: true }, 'fixed_window'],
    [{ drl_threshold: 5 }, 'dynamic'],
    [{ drl_threshold: 5, enable_redis_rolling_limiter: true }, 'sliding_log'],
  ])('%j -> %s', (settings, expected) => {
    expect(algorithmMode(gatewaySettingsSchema.parse(settings))).toBe(expected);
  });
});

describe('algorithmFor (drl_threshold)', () => {
  it.each([
    // rate per second vs threshold x gateways
    [100, 1000, 10, 1, 'drl'], // 100/s > 10
    [100, 1000, 10, 10, 'sliding_log'], // 100/s == 100: not greater
    [100, 1000, 10, 11, 'sliding_log'],
    [10, 1000, 3, 3, 'drl'], // 10/s > 9
    [60, 60_000, 1, 1, 'sliding_log'], // 1/s == 1
  ])('rate %i per %i ms, threshold %i, %i gateways -> %s', (rate, perMs, threshold, n, expected) => {
    expect(algorithmFor('dynamic', { rate, perMs }, threshold, n)).toBe(expected);
  });

  it('a fixed mode ignores the threshold', () => {
    expect(algorithmFor('sentinel', { rate: 1000, perMs: 1000 }, 1, 1)).toBe('sentinel');
  });
});

describe('drlShare', () => {
  it.each([
    [100, 2, 50],
    [10, 3, 3],
    [2, 3, 1],
    [7, 0, 7],
    [7, 1, 7],
  ])('rate %i over %i gateways -> %i', (rate, n, share) => {
    expect(drlShare(rate, n)).toBe(share);
  });
});
