import { describe, expect, it } from 'vitest';
import { TokenBucket } from './token-bucket.ts';

describe('TokenBucket', () => {
  it('allows the burst, then the sustained rate', () => {
    const bucket = new TokenBucket(2, 1, 0);
    expect([bucket.take(0), bucket.take(0), bucket.take(0)]).toEqual([true, true, false]);
    expect(bucket.waitMs(0)).toBe(1000);
    expect(bucket.take(999)).toBe(false);
    expect(bucket.take(1000)).toBe(true);
    expect(bucket.take(60_000) && bucket.take(60_000) && !bucket.take(60_000)).toBe(true);
  });
});
