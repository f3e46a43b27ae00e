import { describe, expect, it } from 'vitest';
import { StreamRateLimitTimeoutError } from './errors.ts';
import { StreamLimiter, StreamLimiters } from './stream-limiter.ts';

describe('StreamLimiter', () => {
  it('gives count slots per interval, then waits for the next interval', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 3, interval_ms: 200 });
    const started = Date.now();
    for (let i = 0; i < 3; i++) await limiter.acquire(undefined, 1000);
    expect(Date.now() - started).toBeLessThan(100);
    await limiter.acquire(undefined, 1000);
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(150);
    expect(waited).toBeLessThan(600);
  });

  it('fails with a typed error when no slot comes within the bound', async () => {
    const limiter = new StreamLimiter({ label: 'payments', count: 1, interval_ms: 5000 });
    await limiter.acquire(undefined, 10);
    const error = await limiter.acquire(undefined, 100).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StreamRateLimitTimeoutError);
    expect(error).toMatchObject({ code: 'stream_rate_limit_timeout', status: 429 });
    expect((error as Error).message).toContain('payments');
  });

  it('stops waiting when the signal aborts', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 5000 });
    await limiter.acquire();
    const controller = new AbortController();
    const pending = limiter.acquire(controller.signal, 10_000);
    setTimeout(() => controller.abort(new Error('client went away')), 20);
    await expect(pending).rejects.toThrow('client went away');
  });
});

describe('StreamLimiters', () => {
  it('shares one limiter per API and label, not across APIs', async () => {
    const limiters = new StreamLimiters();
    const limit = { label: 'shared', count: 1, interval_ms: 5000 };
    await limiters.get('a', limit).acquire(undefined, 0);
    await expect(limiters.get('a', limit).acquire(undefined, 0)).rejects.toBeInstanceOf(StreamRateLimitTimeoutError);
    await expect(limiters.get('b', limit).acquire(undefined, 0)).resolves.toBeUndefined();
  });

  it('a changed resource starts a fresh limiter', async () => {
    const limiters = new StreamLimiters();
    await limiters.get('a', { label: 'x', count: 1, interval_ms: 5000 }).acquire(undefined, 0);
    await expect(limiters.get('a', { label: 'x', count: 2, interval_ms: 5000 }).acquire(undefined, 0)).resolves.toBeUndefined();
  });
});
