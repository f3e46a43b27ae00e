import { describe, expect, it } from 'vitest';
import { gatewaySettingsSchema } from '../../crds/settings.ts';
import { StreamRateLimitWaitError } from './errors.ts';
import { StreamLimiter, StreamLimiters, streamMaxWaitMs } from './stream-limiter.ts';

/** A caller that takes its slot and waits for it, as the gateway does for a request its limits admit. */
const acquire = async (limiter: StreamLimiter, maxWaitMs: number, signal?: AbortSignal): Promise<void> => limiter.take(maxWaitMs).wait(signal);

/** Starts `n` acquisitions at once; each settles with its own elapsed time, in call order. */
async function concurrently(limiter: StreamLimiter, n: number, maxWaitMs: number): Promise<{ order: number[]; settled: { ok: boolean; ms: number; error?: unknown }[] }> {
  const started = Date.now();
  const order: number[] = [];
  const settled = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      acquire(limiter, maxWaitMs).then(
        () => {
          order.push(i);
          return { ok: true, ms: Date.now() - started };
        },
        (error: unknown) => ({ ok: false, ms: Date.now() - started, error }),
      ),
    ),
  );
  return { order, settled };
}

describe('StreamLimiter', () => {
  it('callers wait their turn in arrival order: count per interval, back to back', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 2, interval_ms: 200 });
    const { order, settled } = await concurrently(limiter, 6, 10_000);
    expect(settled.every((s) => s.ok)).toBe(true);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
    const [a, b, c, d, e, f] = settled.map((s) => s.ms);
    for (const first of [a!, b!]) expect(first).toBeLessThan(100);
    for (const second of [c!, d!]) expect(second).toBeGreaterThanOrEqual(200);
    for (const third of [e!, f!]) expect(third).toBeGreaterThanOrEqual(400);
    expect(Math.max(...settled.map((s) => s.ms))).toBeLessThan(900);
  });

  it('a caller whose slot is further away than the bound is refused at once and takes no slot', async () => {
    const limiter = new StreamLimiter({ label: 'payments', count: 2, interval_ms: 300 });
    const { settled } = await concurrently(limiter, 6, 400);
    expect(settled.map((s) => s.ok)).toEqual([true, true, true, true, false, false]);
    for (const refused of settled.slice(4)) {
      expect(refused.ms).toBeLessThan(100);
      expect(refused.error).toBeInstanceOf(StreamRateLimitWaitError);
      expect(refused.error).toMatchObject({ code: 'stream_rate_limit_wait_exceeded', status: 429 });
      expect((refused.error as StreamRateLimitWaitError).waitMs).toBeGreaterThan(400);
      expect((refused.error as Error).message).toContain('payments');
    }
    // The refused callers took nothing: the next slot is still the third interval's.
    const started = Date.now();
    await acquire(limiter, 10_000);
    expect(Date.now() - started).toBeLessThan(400);
  });

  it('a bound of 0 admits only what has a slot now', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 5000 });
    await acquire(limiter, 0);
    await expect(acquire(limiter, 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
  });

  it('a caller that leaves stops waiting and gives its slot to the next caller', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 300 });
    await acquire(limiter, 0);
    const controller = new AbortController();
    const leaving = acquire(limiter, 10_000, controller.signal);
    setTimeout(() => controller.abort(new Error('client went away')), 20);
    await expect(leaving).rejects.toThrow('client went away');
    const started = Date.now();
    await acquire(limiter, 10_000);
    // The slot it left (the next interval), not the one after.
    expect(Date.now() - started).toBeLessThan(450);
  });

  it('a caller that leaves moves every caller behind it up one place, and frees the last slot for the next newcomer', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 300 });
    await acquire(limiter, 0);
    const started = Date.now();
    const timed = (signal?: AbortSignal) => acquire(limiter, 10_000, signal).then(() => Date.now() - started, (error: unknown) => error);
    const leaving = new AbortController();
    const [left, second, third] = [timed(leaving.signal), timed(), timed()];
    setTimeout(() => leaving.abort(new Error('client went away')), 50);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const newcomer = timed();
    expect(await left).toMatchObject({ message: 'client went away' });
    // The second and third move up to the slots at 300 and 600 ms; the newcomer gets the one at 900, not 1200.
    const [secondMs, thirdMs, newcomerMs] = (await Promise.all([second, third, newcomer])) as number[];
    expect(secondMs).toBeGreaterThanOrEqual(290);
    expect(secondMs).toBeLessThan(550);
    expect(thirdMs).toBeGreaterThanOrEqual(590);
    expect(thirdMs).toBeLessThan(850);
    expect(newcomerMs).toBeGreaterThanOrEqual(890);
    expect(newcomerMs).toBeLessThan(1150);
  });

  it('a slot given back by a request a limit refused goes at once to the first caller waiting for a later one', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 60_000 });
    const refused = limiter.take(0);
    const started = Date.now();
    const waiting = acquire(limiter, 120_000);
    refused.giveBack();
    await waiting;
    expect(Date.now() - started).toBeLessThan(200);
    expect(() => limiter.take(0)).toThrow(StreamRateLimitWaitError);
  });

  it('a slot given back unused (its request refused by a limit) goes to the next caller at once', async () => {
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 60_000 });
    limiter.take(0).giveBack();
    await acquire(limiter, 0);
    expect(() => limiter.take(0)).toThrow(StreamRateLimitWaitError);
  });
});

describe('streamMaxWaitMs', () => {
  it('is stream_rate_limit_max_wait_ms, by default the upstream timeout', () => {
    expect(streamMaxWaitMs(gatewaySettingsSchema.parse({}))).toBe(30_000);
    expect(streamMaxWaitMs(gatewaySettingsSchema.parse({ upstream_timeout_ms: 5000 }))).toBe(5000);
    expect(streamMaxWaitMs(gatewaySettingsSchema.parse({ upstream_timeout_ms: 5000, stream_rate_limit_max_wait_ms: 0 }))).toBe(0);
  });
});

describe('StreamLimiters', () => {
  it('shares one limiter per API and label, not across APIs', async () => {
    const limiters = new StreamLimiters();
    const limit = { label: 'shared', count: 1, interval_ms: 5000 };
    await acquire(limiters.get('a', limit), 0);
    await expect(acquire(limiters.get('a', limit), 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
    await expect(acquire(limiters.get('b', limit), 0)).resolves.toBeUndefined();
  });

  it('a changed resource goes on from the slots given: its new count applies to the slots still to give', async () => {
    const limiters = new StreamLimiters();
    const small = { label: 'x', count: 1, interval_ms: 5000 };
    const large = { label: 'x', count: 3, interval_ms: 5000 };
    await acquire(limiters.get('a', small), 0);
    await expect(acquire(limiters.get('a', small), 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
    // Raised to 3: two more in this interval, not three.
    await acquire(limiters.get('a', large), 0);
    await acquire(limiters.get('a', large), 0);
    await expect(acquire(limiters.get('a', large), 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
  });

  it('settings that alternate (workers on two config versions) admit no more than the larger count', async () => {
    const limiters = new StreamLimiters();
    const versions = [
      { label: 'x', count: 2, interval_ms: 60_000 },
      { label: 'x', count: 3, interval_ms: 60_000 },
    ];
    const outcomes = versions.flatMap(() => Array.from({ length: 10 }, (_, i) => limiters.reserve({ apiId: 'a', limit: versions[i % 2]!, maxWaitMs: 0 })));
    expect(outcomes.filter((outcome) => 'startMs' in outcome)).toHaveLength(3);
  });

  it('a lowered count takes no slot given back from callers already admitted', async () => {
    const limiters = new StreamLimiters();
    for (let i = 0; i < 3; i += 1) await acquire(limiters.get('a', { label: 'x', count: 3, interval_ms: 60_000 }), 0);
    await expect(acquire(limiters.get('a', { label: 'x', count: 1, interval_ms: 60_000 }), 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
  });
});
