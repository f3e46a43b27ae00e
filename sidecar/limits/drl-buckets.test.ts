import { describe, expect, it } from 'vitest';
import { DrlBuckets } from './drl-buckets.ts';

describe('DrlBuckets', () => {
  it('allows the share at once, then refills continuously at share per window', () => {
    const buckets = new DrlBuckets();
    const taken = Array.from({ length: 6 }, () => buckets.take('l', 5, 1000, 0));
    expect(taken.map((r) => r.allowed)).toEqual([true, true, true, true, true, false]);
    expect(taken.map((r) => r.remaining)).toEqual([4, 3, 2, 1, 0, 0]);
    expect(taken[4]).toMatchObject({ limit: 5, resetMs: 1000 });
    // 400 ms of a 1000 ms window at 5 per window: 2 tokens back.
    expect(buckets.take('l', 5, 1000, 400)).toMatchObject({ allowed: true, remaining: 1 });
    expect(buckets.take('l', 5, 1000, 400)).toMatchObject({ allowed: true, remaining: 0 });
    expect(buckets.take('l', 5, 1000, 400)).toMatchObject({ allowed: false });
  });

  it('a smaller share (more gateways) caps the bucket at once', () => {
    const buckets = new DrlBuckets();
    buckets.take('l', 9, 1000, 0);
    const results = Array.from({ length: 4 }, () => buckets.take('l', 3, 1000, 0));
    expect(results.map((r) => r.allowed)).toEqual([true, true, true, false]);
  });

  it('refund gives a token back, never above the share', () => {
    const buckets = new DrlBuckets();
    buckets.take('l', 1, 1000, 0);
    buckets.refund('l', 1);
    buckets.refund('l', 1);
    expect(buckets.take('l', 1, 1000, 0).allowed).toBe(true);
    expect(buckets.take('l', 1, 1000, 0).allowed).toBe(false);
  });

  it('sweep drops buckets idle for a whole window', () => {
    const buckets = new DrlBuckets();
    buckets.take('a', 1, 1000, 0);
    buckets.take('b', 1, 5000, 0);
    buckets.sweep(1000);
    expect(buckets.size).toBe(1);
  });
});
