import { afterEach, describe, expect, it, vi } from 'vitest';
import { gatewaySettingsSchema } from '../../crds/settings.ts';
import { StreamRateLimitWaitError } from './errors.ts';
import { SlotTime, SlotWait, StreamLimiter, StreamLimiters, streamMaxWaitMs } from './stream-limiter.ts';

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

/** A clock the test moves by hand. */
function manualClock(): { now: () => number; advance: (ms: number) => void } {
  let nowMs = 1_000_000;
  return { now: () => nowMs, advance: (ms) => (nowMs += ms) };
}

/** Slot times a limiter gives, relative to `from`; a refusal reads as null. */
const startsOf = (reservations: ReturnType<StreamLimiter['reserve']>[], from: number): (number | null)[] =>
  reservations.map((reservation) => ('startMs' in reservation ? reservation.startMs - from : null));

describe('StreamLimiter on a clock moved by hand', () => {
  it('never gives more than count slots within any interval, whenever the callers come', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiter = new StreamLimiter({ label: 'l', count: 2, interval_ms: 300 }, clock.now);
    const given = [limiter.reserve(10_000)];
    clock.advance(200);
    given.push(limiter.reserve(10_000));
    clock.advance(110);
    // At 310 the slot at 0 is an interval old: one more now. The next must wait for the one at 200 to be an interval old.
    given.push(limiter.reserve(10_000), limiter.reserve(10_000), limiter.reserve(10_000));
    expect(startsOf(given, t0)).toEqual([0, 200, 310, 500, 610]);
  });

  it('a slot given back before later ones goes to the next newcomer when nobody waits behind it', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 2000 }, clock.now);
    const given = [0, 1, 2, 3].map(() => limiter.reserve(20_000));
    expect(startsOf(given, t0)).toEqual([0, 2000, 4000, 6000]);
    clock.advance(300);
    limiter.release((given[3] as { id: number }).id);
    clock.advance(200);
    limiter.release((given[2] as { id: number }).id);
    clock.advance(300);
    // The slot at 4000 is free again: the newcomer takes it, not the one at 6000.
    expect(startsOf([limiter.reserve(20_000)], t0)).toEqual([4000]);
  });

  it('a raised count or a shorter interval brings the callers already waiting forward at once', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const moves: [number, number][] = [];
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 2000 }, clock.now);
    const given = [0, 1, 2, 3, 4].map(() => limiter.reserve(20_000, (move) => moves.push([move.id, move.startMs - t0])));
    clock.advance(500);
    limiter.change({ label: 'l', count: 10, interval_ms: 2000 });
    const ids = given.map((reservation) => (reservation as { id: number }).id);
    expect(moves).toEqual(ids.slice(1).map((id) => [id, 500]));
    // Five slots given within this interval: five more for newcomers, then the next interval's.
    expect(startsOf([0, 1, 2, 3, 4, 5].map(() => limiter.reserve(20_000)), t0)).toEqual([500, 500, 500, 500, 500, 2000]);

    const shortened = new StreamLimiter({ label: 's', count: 1, interval_ms: 10_000 }, clock.now);
    const t1 = clock.now();
    const queued = [0, 1, 2].map(() => shortened.reserve(30_000));
    expect(startsOf(queued, t1)).toEqual([0, 10_000, 20_000]);
    clock.advance(500);
    shortened.change({ label: 's', count: 1, interval_ms: 1000 });
    expect(startsOf([shortened.reserve(30_000)], t1)).toEqual([3000]);
  });

  it('a lowered count keeps the slots of the callers waiting, and newcomers count them', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiter = new StreamLimiter({ label: 'l', count: 3, interval_ms: 1000 }, clock.now);
    const moves: unknown[] = [];
    const given = [0, 1, 2, 3].map(() => limiter.reserve(10_000, (move) => moves.push(move)));
    expect(startsOf(given, t0)).toEqual([0, 0, 0, 1000]);
    limiter.change({ label: 'l', count: 1, interval_ms: 1000 });
    expect(moves).toEqual([]);
    expect(startsOf([limiter.reserve(10_000)], t0)).toEqual([2000]);
  });

  it('a slot given back after a change moves the callers behind under the settings of now', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiters = new StreamLimiters(clock.now);
    const two = { label: 'l', count: 2, interval_ms: 10_000 };
    const one = { label: 'l', count: 1, interval_ms: 10_000 };
    for (let i = 0; i < 2; i += 1) limiters.get('a', two).take(0);
    clock.advance(200);
    const leaving = limiters.get('a', two).take(30_000);
    limiters.get('a', two).take(30_000);
    limiters.get('a', two).take(30_000);
    clock.advance(800);
    limiters.get('a', one);
    clock.advance(3000);
    leaving.giveBack();
    // Under 1 per 10 s the two callers left wait for 10 s and 20 s: the next newcomer, for 30 s.
    expect(startsOf([limiters.reserve({ apiId: 'a', limit: one, maxWaitMs: 60_000 })], t0)).toEqual([30_000]);
  });

  it('a lengthened interval counts the last count slots given, however long ago', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiters = new StreamLimiters(clock.now);
    const short = { label: 'l', count: 2, interval_ms: 1000 };
    const long = { label: 'l', count: 2, interval_ms: 10_000 };
    limiters.reserve({ apiId: 'a', limit: short, maxWaitMs: 0 });
    limiters.reserve({ apiId: 'a', limit: short, maxWaitMs: 0 });
    clock.advance(1500);
    limiters.reserve({ apiId: 'a', limit: short, maxWaitMs: 0 });
    clock.advance(500);
    limiters.configure([{ apiId: 'a', limit: long }]);
    clock.advance(2000);
    // Three slots in the last 10 s (at 0, 0 and 1500): under 2 per 10 s the next comes at 10 s.
    expect(startsOf([limiters.reserve({ apiId: 'a', limit: long, maxWaitMs: 60_000 })], t0)).toEqual([10_000]);
  });

  it('gives back the slots still to come of the callers one owner held, and keeps its slots that came', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiter = new StreamLimiter({ label: 'l', count: 1, interval_ms: 1000 }, clock.now);
    const owners = [1, 0, 1, 0];
    const given = owners.map((owner) => limiter.reserve(10_000, undefined, owner));
    expect(startsOf(given, t0)).toEqual([0, 1000, 2000, 3000]);
    clock.advance(100);
    limiter.releaseWaitingOf(0);
    // Owner 1's slot at 0 came and stays; its slot at 2000 moves up to 1000; the next newcomer gets 2000.
    expect(startsOf([limiter.reserve(10_000)], t0)).toEqual([2000]);
  });

  it('a resource gone lets every caller waiting go at once, and forgets the slots', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiters = new StreamLimiters(clock.now);
    const limit = { label: 'l', count: 1, interval_ms: 60_000 };
    const moves: number[] = [];
    const given = [0, 1, 2].map(() => limiters.reserve({ apiId: 'a', limit, maxWaitMs: 200_000 }, (move) => moves.push(move.startMs - t0)));
    expect(startsOf(given, t0)).toEqual([0, 60_000, 120_000]);
    clock.advance(10);
    limiters.configure([{ apiId: 'b', limit }]);
    expect(moves).toEqual([10, 10]);
    // Named again later, the resource starts from nothing given.
    expect(startsOf([limiters.reserve({ apiId: 'a', limit, maxWaitMs: 0 })], t0)).toEqual([10]);
  });

  it('a slot given back after the primary moved it is found by its id, wherever it went', () => {
    const clock = manualClock();
    const t0 = clock.now();
    const limiters = new StreamLimiters(clock.now);
    const limit = { label: 'l', count: 1, interval_ms: 2000 };
    const given = [0, 1, 2, 3].map(() => limiters.reserve({ apiId: 'a', limit, maxWaitMs: 20_000 }));
    const [, second, third, fourth] = given.map((reservation) => (reservation as { id: number }).id);
    clock.advance(100);
    limiters.release({ apiId: 'a', id: second! });
    limiters.release({ apiId: 'a', id: third! });
    limiters.release({ apiId: 'a', id: fourth! });
    // All three given back: the next slots are at 2000 and 4000, one per interval.
    expect(startsOf([0, 1].map(() => limiters.reserve({ apiId: 'a', limit, maxWaitMs: 20_000 })), t0)).toEqual([2000, 4000]);
  });
});

describe('SlotWait', () => {
  afterEach(() => vi.useRealTimers());

  it('releases callers in slot order when the clock reads a timer early, slots 1 ms apart', async () => {
    vi.useFakeTimers({ now: 0 });
    // Date.now() may read a millisecond behind the timers' clock: here, at the first slot's moment.
    const now = (): number => (Date.now() === 200 ? 199 : Date.now());
    const wait = new SlotWait(now);
    const order: string[] = [];
    const first = wait.until(new SlotTime(200), undefined, () => undefined).then(() => order.push('200'));
    const second = wait.until(new SlotTime(201), undefined, () => undefined).then(() => order.push('201'));
    const sameAsFirst = wait.until(new SlotTime(200), undefined, () => undefined).then(() => order.push('200 again'));
    await vi.advanceTimersByTimeAsync(200);
    expect(order).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    await Promise.all([first, second, sameAsFirst]);
    expect(order).toEqual(['200', '200 again', '201']);
  });

  it('a slot given after a later one still goes first', async () => {
    vi.useFakeTimers({ now: 0 });
    const wait = new SlotWait();
    const order: number[] = [];
    const later = wait.until(new SlotTime(300), undefined, () => undefined).then(() => order.push(300));
    const sooner = wait.until(new SlotTime(100), undefined, () => undefined).then(() => order.push(100));
    await vi.advanceTimersByTimeAsync(100);
    await sooner;
    expect(order).toEqual([100]);
    await vi.advanceTimersByTimeAsync(200);
    await later;
    expect(order).toEqual([100, 300]);
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
  it('shares one limiter per API, not across APIs', async () => {
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

  it('a renamed label goes on from the slots given', async () => {
    const limiters = new StreamLimiters();
    await acquire(limiters.get('a', { label: 'x', count: 1, interval_ms: 60_000 }), 0);
    await expect(acquire(limiters.get('a', { label: 'y', count: 1, interval_ms: 60_000 }), 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
  });

  it('a lowered count takes no slot given back from callers already admitted', async () => {
    const limiters = new StreamLimiters();
    for (let i = 0; i < 3; i += 1) await acquire(limiters.get('a', { label: 'x', count: 3, interval_ms: 60_000 }), 0);
    await expect(acquire(limiters.get('a', { label: 'x', count: 1, interval_ms: 60_000 }), 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
  });
});
