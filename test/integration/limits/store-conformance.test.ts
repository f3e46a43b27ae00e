import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { limiterKey, quotaKey } from '../../../common/redis-keys.ts';
import type { CompiledSmoothing } from '../../../crds/compiled.ts';
import { LATEST_QUOTA_RENEWAL_SECONDS, LONGEST_QUOTA_PERIOD_SECONDS } from '../../../crds/quota-times.ts';
import { defaultGatewaySettings } from '../../../crds/settings.ts';
import { MemoryLimitStore } from '../../../sidecar/limits/stores/memory-store.ts';
import { RedisLimitStore } from '../../../sidecar/limits/stores/redis-store.ts';
import type { LimitStore, PeekResult, StoreOp, StoreResult } from '../../../sidecar/limits/stores/store.ts';
import { testEnv } from '../../harness/index.ts';
import { failuresReporter, manualClock } from '../../support/limits-fixtures.ts';
import { uniqueId } from './helpers.ts';

/**
 * One store contract, proved on both stores: the in-memory store (standalone) and the Lua
 * script on a real Redis run one table of op sequences on one manual clock, and each must
 * give exactly the results the table writes out. Windows are a minute long so that Redis's
 * key expiry, which runs on real time, never ends a window the manual clock still holds.
 */

const P = 60_000;
/** The longest quota period and the latest renewal time a quota counts with (crds/quota-times.ts), in ms. */
const LONGEST_PERIOD_MS = LONGEST_QUOTA_PERIOD_SECONDS * 1_000;
const LATEST_MS = LATEST_QUOTA_RENEWAL_SECONDS * 1_000;

/** The case's ops are built with its own limiter names and its start time. */
interface Scope {
  id(name: string): string;
  start: number;
}

interface Step {
  /** Milliseconds after the case's start. */
  at: number;
  ops: (scope: Scope) => StoreOp[];
  /** A limit outside the store (the DRL) already refused the request. */
  refused?: boolean;
  /** Read the limiters (the effective-limits read) instead of running the ops. */
  peek?: boolean;
  /** The results, with reset times relative to the case's start (0 stays 0: never); given that start when they are far from it. */
  expect: StoreResult[] | PeekResult[] | ((start: number) => StoreResult[]);
}

const ok = (limit: number, remaining: number, resetAt: number, smoothing: StoreResult['smoothing'] = null): StoreResult => ({
  allowed: true,
  limit,
  remaining,
  resetMs: resetAt,
  smoothing,
});
const no = (limit: number, resetAt: number): StoreResult => ({ allowed: false, limit, remaining: 0, resetMs: resetAt, smoothing: null });

const sliding = (limiterId: string, rate: number, smoothing: CompiledSmoothing | null = null): StoreOp => ({
  kind: 'sliding_log',
  limiterId,
  rate,
  perMs: P,
  smoothing,
});
const sentinel = (limiterId: string, rate: number): StoreOp => ({ kind: 'sentinel', limiterId, rate, perMs: P });
const fixed = (limiterId: string, rate: number): StoreOp => ({ kind: 'fixed_window', limiterId, rate, perMs: P });
const quota = (quotaId: string, max: number, renewalMs: number, initRemaining: number, initRenewsMs: number): StoreOp => ({
  kind: 'quota',
  quotaId,
  max,
  renewalMs,
  initRemaining,
  initRenewsMs,
});
const seen = (count: number, limit: number, remaining: number, resetAt: number): PeekResult => ({ count, limit, remaining, resetMs: resetAt });
const smoothing = (delay: number): CompiledSmoothing => ({ enabled: true, threshold: 2, step: 2, trigger: 0.5, delay });

/** One of each op, so a peek case reads all four kinds together. */
const everyKind = (s: Scope): StoreOp[] => [sliding(s.id('l'), 2), fixed(s.id('f'), 3), sentinel(s.id('s'), 2), quota(s.id('q'), 5, P, 5, s.start + P)];

/** A smoothed sliding log of rate 10 driven from its threshold (2) up to an allowance of 6. */
const risingToSix: Step[] = [
      { at: 0, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(2, 1, P)] },
      { at: 1, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(2, 0, P)] },
      { at: 2, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(4, 1, P, { oldAllowance: 2, newAllowance: 4 })] },
      { at: 3, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(4, 0, P)] },
      { at: 4, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(6, 1, P, { oldAllowance: 4, newAllowance: 6 })] },
];

const cases: [string, Step[]][] = [
  [
    'a peek reads each limiter as a request arriving then would find it, and counts nothing',
    [
      { at: 0, peek: true, ops: everyKind, expect: [seen(0, 2, 2, P), seen(0, 3, 3, P), seen(0, 2, 2, P), seen(0, 5, 5, P)] },
      { at: 0, ops: everyKind, expect: [ok(2, 1, P), ok(3, 2, P), ok(2, 1, P), ok(5, 4, P)] },
      { at: 1000, peek: true, ops: everyKind, expect: [seen(1, 2, 1, P), seen(1, 3, 2, P), seen(1, 2, 1, P), seen(1, 5, 4, P)] },
      { at: 1001, peek: true, ops: everyKind, expect: [seen(1, 2, 1, P), seen(1, 3, 2, P), seen(1, 2, 1, P), seen(1, 5, 4, P)] },
      // The sentinel's flag now blocks until a window after the request that set it: its reset.
      { at: 2000, ops: everyKind, expect: [ok(2, 0, P), ok(3, 1, P), ok(2, 0, 2000 + P), ok(5, 3, P)] },
      // A full sliding log resets when a caller that stops would pass again: once all but one
      // of its entries, the would-be request's own included, have left the window.
      { at: 3000, peek: true, ops: everyKind, expect: [seen(2, 2, 0, 2000 + P), seen(2, 3, 1, P), seen(2, 2, 0, 2000 + P), seen(2, 5, 3, P)] },
      { at: 3000, ops: everyKind, expect: [no(2, 2000 + P)] },
      // The refusal is in the sliding log (spike arrest); the ops after it never ran.
      { at: 4000, peek: true, ops: everyKind, expect: [seen(3, 2, 0, 3000 + P), seen(2, 3, 1, P), seen(2, 2, 0, 2000 + P), seen(2, 5, 3, P)] },
      // A window on, the first entries have left the logs (the sentinel's flag still blocks),
      // the fixed window has started afresh and the quota has renewed.
      { at: P + 5, peek: true, ops: everyKind, expect: [seen(2, 2, 0, 3000 + P), seen(0, 3, 3, 2 * P), seen(1, 2, 0, 2000 + P), seen(0, 5, 5, P + 5 + P)] },
    ],
  ],
  [
    'a peek reads a smoothed allowance as the next request would meet it: the threshold before the first request, a pending step taken',
    [
      { at: 0, peek: true, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [seen(0, 2, 2, P)] },
      { at: 0, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [ok(2, 1, P)] },
      { at: 1, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [ok(2, 0, P)] },
      { at: 2, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [ok(4, 1, P, { oldAllowance: 2, newAllowance: 4 })] },
      { at: 3, peek: true, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [seen(3, 4, 1, P)] },
      { at: 3, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [ok(4, 0, P)] },
      // The window is at the allowance, but the next request steps it up: it would be admitted at 6.
      { at: 4, peek: true, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [seen(4, 6, 2, P)] },
      { at: 4, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [ok(6, 1, P, { oldAllowance: 4, newAllowance: 6 })] },
      // A window on, idle: the next request steps it down, and a peek reads the allowance it would meet.
      { at: P + 10, peek: true, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [seen(0, 4, 4, 2 * P + 10)] },
      { at: P + 10, ops: (s) => [sliding(s.id('m'), 10, smoothing(0))], expect: [ok(4, 3, 2 * P + 10, { oldAllowance: 6, newAllowance: 4 })] },
    ],
  ],
  [
    'sliding log: every request is logged, refused ones too (spike arrest)',
    [
      { at: 0, ops: (s) => [sliding(s.id('l'), 2)], expect: [ok(2, 1, P)] },
      { at: 1000, ops: (s) => [sliding(s.id('l'), 2)], expect: [ok(2, 0, P)] },
      // Refused: a caller that stops passes again once the entries at 0 and 1000 have left.
      { at: 2000, ops: (s) => [sliding(s.id('l'), 2)], expect: [no(2, 1000 + P)] },
      // The first entry has left the window, but the refused one still counts, and so will
      // this one: the entry at 2000 must leave too.
      { at: P + 1, ops: (s) => [sliding(s.id('l'), 2)], expect: [no(2, 2000 + P)] },
      { at: P + 2001, ops: (s) => [sliding(s.id('l'), 2)], expect: [ok(2, 0, P + 1 + P)] },
    ],
  ],
  [
    'sentinel: the request that reaches the limit sets a flag that refuses for a whole window; refusals are logged',
    [
      { at: 0, ops: (s) => [sentinel(s.id('s'), 2)], expect: [ok(2, 1, P)] },
      // This one sets the flag: nothing passes before it ends, which is its reset.
      { at: 1000, ops: (s) => [sentinel(s.id('s'), 2)], expect: [ok(2, 0, 1000 + P)] },
      { at: 2000, ops: (s) => [sentinel(s.id('s'), 2)], expect: [no(2, 1000 + P)] },
      { at: P + 500, ops: (s) => [sentinel(s.id('s'), 2)], expect: [no(2, 1000 + P)] },
      // The flag has ended, but the refusals under it (at 2000 and P + 500) fill the window:
      // a new flag, for a window from now (spike arrest, as in the sliding log).
      { at: P + 1000, ops: (s) => [sentinel(s.id('s'), 2)], expect: [no(2, 2 * P + 1000)] },
      // A quiet window on, the flag and every entry are gone.
      { at: 2 * P + 1001, ops: (s) => [sentinel(s.id('s'), 2)], expect: [ok(2, 1, 3 * P + 1001)] },
    ],
  ],
  [
    'fixed window: one counter per window aligned to its length',
    [
      { at: 0, ops: (s) => [fixed(s.id('f'), 2)], expect: [ok(2, 1, P)] },
      { at: 30_000, ops: (s) => [fixed(s.id('f'), 2)], expect: [ok(2, 0, P)] },
      { at: P - 1, ops: (s) => [fixed(s.id('f'), 2)], expect: [no(2, P)] },
      { at: P, ops: (s) => [fixed(s.id('f'), 2)], expect: [ok(2, 1, 2 * P)] },
    ],
  ],
  [
    'fixed window: a refusal is not counted, so a rate raised mid-window admits at once',
    [
      { at: 0, ops: (s) => [fixed(s.id('f'), 1)], expect: [ok(1, 0, P)] },
      { at: 1, ops: (s) => [fixed(s.id('f'), 1)], expect: [no(1, P)] },
      { at: 2, ops: (s) => [fixed(s.id('f'), 1)], expect: [no(1, P)] },
      { at: 3, ops: (s) => [fixed(s.id('f'), 3)], expect: [ok(3, 1, P)] },
      { at: 4, peek: true, ops: (s) => [fixed(s.id('f'), 3)], expect: [{ count: 2, limit: 3, remaining: 1, resetMs: P }] },
    ],
  ],
  [
    'fixed window: a window of another length that starts with the old one counts from 0',
    [
      { at: 0, ops: (s) => [fixed(s.id('f'), 2)], expect: [ok(2, 1, P)] },
      { at: 1, ops: (s) => [fixed(s.id('f'), 2)], expect: [ok(2, 0, P)] },
      // The case starts on the hour: a window of 2P starts there too.
      { at: 2, ops: (s) => [{ kind: 'fixed_window', limiterId: s.id('f'), rate: 2, perMs: 2 * P }], expect: [ok(2, 1, 2 * P)] },
    ],
  ],
  [
    'quota: counts down, refuses at zero, and renews whole',
    [
      { at: 0, ops: (s) => [quota(s.id('q'), 3, P, 3, s.start + P)], expect: [ok(3, 2, P)] },
      { at: 1, ops: (s) => [quota(s.id('q'), 3, P, 3, s.start + P)], expect: [ok(3, 1, P)] },
      { at: 2, ops: (s) => [quota(s.id('q'), 3, P, 3, s.start + P)], expect: [ok(3, 0, P)] },
      { at: 3, ops: (s) => [quota(s.id('q'), 3, P, 3, s.start + P)], expect: [no(3, P)] },
      { at: P, ops: (s) => [quota(s.id('q'), 3, P, 3, s.start + P)], expect: [ok(3, 2, 2 * P)] },
    ],
  ],
  [
    'quota: what a period used stays used when its max changes, raised or lowered',
    [
      { at: 0, ops: (s) => [quota(s.id('q'), 2, P, 2, s.start + P)], expect: [ok(2, 1, P)] },
      { at: 1, ops: (s) => [quota(s.id('q'), 2, P, 2, s.start + P)], expect: [ok(2, 0, P)] },
      { at: 2, ops: (s) => [quota(s.id('q'), 2, P, 2, s.start + P)], expect: [no(2, P)] },
      // Raised to 5 mid-period: 2 used, 3 left at once.
      { at: 3, ops: (s) => [quota(s.id('q'), 5, P, 5, s.start + P)], expect: [ok(5, 2, P)] },
      { at: 4, peek: true, ops: (s) => [quota(s.id('q'), 5, P, 5, s.start + P)], expect: [{ limit: 5, remaining: 2, resetMs: P, count: 3 }] },
      // Lowered to 4: 3 used, 1 left; lowered to 2, none.
      { at: 5, ops: (s) => [quota(s.id('q'), 4, P, 4, s.start + P)], expect: [ok(4, 0, P)] },
      { at: 6, ops: (s) => [quota(s.id('q'), 2, P, 2, s.start + P)], expect: [no(2, P)] },
      // Under the new max, the 4 used still read as used; raised to 5 again, 1 is left, not 3.
      { at: 7, peek: true, ops: (s) => [quota(s.id('q'), 2, P, 2, s.start + P)], expect: [{ limit: 2, remaining: 0, resetMs: P, count: 4 }] },
      { at: 8, ops: (s) => [quota(s.id('q'), 5, P, 5, s.start + P)], expect: [ok(5, 0, P)] },
      { at: 9, ops: (s) => [quota(s.id('q'), 5, P, 5, s.start + P)], expect: [no(5, P)] },
      { at: P, ops: (s) => [quota(s.id('q'), 2, P, 2, s.start + P)], expect: [ok(2, 1, 2 * P)] },
    ],
  ],
  [
    // The bounds the plan counts quotas within (crds/quota-times.ts): Redis must set the expiry of
    // a renewal at the latest time plus the longest period as it does any other, not wrap it to a past one.
    'quota: the longest period, renewing at the latest time a key may name, counts as any other',
    [
      { at: 0, ops: (s) => [quota(s.id('q'), 2, LONGEST_PERIOD_MS, 2, LATEST_MS)], expect: (start) => [ok(2, 1, LATEST_MS - start)] },
      { at: 1, ops: (s) => [quota(s.id('q'), 2, LONGEST_PERIOD_MS, 2, LATEST_MS)], expect: (start) => [ok(2, 0, LATEST_MS - start)] },
      { at: 2, ops: (s) => [quota(s.id('q'), 2, LONGEST_PERIOD_MS, 2, LATEST_MS)], expect: (start) => [no(2, LATEST_MS - start)] },
    ],
  ],
  [
    // The largest quota_max a Key may have (crds/schemas/common.ts): one request uses one of it.
    'quota: a max near 2^53 counts one per request, as any other',
    [
      { at: 0, ops: (s) => [quota(s.id('q'), Number.MAX_SAFE_INTEGER, P, Number.MAX_SAFE_INTEGER, s.start + P)], expect: [ok(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER - 1, P)] },
      { at: 1, ops: (s) => [quota(s.id('q'), Number.MAX_SAFE_INTEGER, P, Number.MAX_SAFE_INTEGER, s.start + P)], expect: [ok(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER - 2, P)] },
      { at: 2, peek: true, ops: (s) => [quota(s.id('q'), Number.MAX_SAFE_INTEGER, P, Number.MAX_SAFE_INTEGER, s.start + P)], expect: [{ limit: Number.MAX_SAFE_INTEGER, remaining: Number.MAX_SAFE_INTEGER - 2, resetMs: P, count: 2 }] },
    ],
  ],
  [
    'quota: starts from the session\'s remaining count, and one without renewal never resets',
    [
      { at: 0, ops: (s) => [quota(s.id('q'), 5, 0, 1, 0)], expect: [ok(5, 0, 0)] },
      { at: 10 * P, ops: (s) => [quota(s.id('q'), 5, 0, 1, 0)], expect: [no(5, 0)] },
    ],
  ],
  [
    'smoothing: the allowance rises by step with the rate and falls back when it drops',
    [
      ...risingToSix,
      { at: 2 * P, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(4, 3, 3 * P, { oldAllowance: 6, newAllowance: 4 })] },
      { at: 2 * P + 1, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(4, 2, 3 * P)] },
    ],
  ],
  [
    'smoothing: no second change within delay of the last, so the lower allowance refuses',
    [
      { at: 0, ops: (s) => [sliding(s.id('l'), 10, smoothing(1))], expect: [ok(2, 1, P)] },
      { at: 1, ops: (s) => [sliding(s.id('l'), 10, smoothing(1))], expect: [ok(2, 0, P)] },
      { at: 2, ops: (s) => [sliding(s.id('l'), 10, smoothing(1))], expect: [ok(4, 1, P, { oldAllowance: 2, newAllowance: 4 })] },
      { at: 3, ops: (s) => [sliding(s.id('l'), 10, smoothing(1))], expect: [ok(4, 0, P)] },
      { at: 4, ops: (s) => [sliding(s.id('l'), 10, smoothing(1))], expect: [no(4, 1 + P)] },
      { at: 1002, ops: (s) => [sliding(s.id('l'), 10, smoothing(1))], expect: [ok(6, 0, P, { oldAllowance: 4, newAllowance: 6 })] },
    ],
  ],
  [
    'smoothing: an edit that lowers the rate under the allowance bounds it at once, with no event',
    [
      ...risingToSix,
      // The rate is now 3: five requests are in the window, so the sixth is refused.
      { at: 5, peek: true, ops: (s) => [sliding(s.id('l'), 3, smoothing(0))], expect: [seen(5, 3, 0, 3 + P)] },
      { at: 5, ops: (s) => [sliding(s.id('l'), 3, smoothing(0))], expect: [no(3, 3 + P)] },
    ],
  ],
  [
    'smoothing: an edit that raises the threshold over the allowance bounds it at once, with no event',
    [
      { at: 0, ops: (s) => [sliding(s.id('l'), 10, smoothing(0))], expect: [ok(2, 1, P)] },
      { at: 1, ops: (s) => [sliding(s.id('l'), 10, { ...smoothing(0), threshold: 6 })], expect: [ok(6, 4, P)] },
    ],
  ],
  [
    'the first refusal stops the request: later ops do not run, earlier admissions are given back',
    [
      { at: 0, ops: (s) => [fixed(s.id('b'), 1)], expect: [ok(1, 0, P)] },
      {
        at: 1,
        ops: (s) => [fixed(s.id('a'), 5), fixed(s.id('b'), 1), sliding(s.id('c'), 5)],
        expect: [ok(5, 4, P), no(1, P)],
      },
      { at: 2, ops: (s) => [fixed(s.id('a'), 5), sliding(s.id('c'), 5)], expect: [ok(5, 4, P), ok(5, 4, 2 + P)] },
    ],
  ],
  [
    'a request refused outside the store (the DRL) consumes nothing in it',
    [
      {
        at: 0,
        refused: true,
        ops: (s) => [fixed(s.id('a'), 5), sentinel(s.id('b'), 1), sliding(s.id('c'), 5)],
        expect: [ok(5, 4, P), ok(1, 0, P), ok(5, 4, P)],
      },
      {
        at: 1,
        ops: (s) => [fixed(s.id('a'), 5), sentinel(s.id('b'), 1), sliding(s.id('c'), 5)],
        expect: [ok(5, 4, P), ok(1, 0, 1 + P), ok(5, 4, 1 + P)],
      },
      { at: 2, ops: (s) => [sentinel(s.id('b'), 1)], expect: [no(1, 1 + P)] },
    ],
  ],
  [
    'a quota refusal gives back the limits before it',
    [
      { at: 0, ops: (s) => [fixed(s.id('a'), 5), quota(s.id('q'), 1, P, 0, s.start + P)], expect: [ok(5, 4, P), no(1, P)] },
      { at: 1, ops: (s) => [fixed(s.id('a'), 5)], expect: [ok(5, 4, P)] },
    ],
  ],
];

const redis = new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });
const backgroundErrors: unknown[] = [];
const settings = { ...defaultGatewaySettings, rate_limit_response_headers: 'rate_limits' as const };
/** Every key a case may leave in Redis (a quota without renewal never expires). */
const used: string[] = [];

afterAll(async () => {
  await redis.del(...used);
  redis.disconnect();
});

const stores: [string, (now: () => number) => LimitStore][] = [
  ['in-memory store', (now) => new MemoryLimitStore(now)],
  [
    'Redis store',
    (now) => new RedisLimitStore(redis, { instanceId: uniqueId('conformance'), reporter: failuresReporter((e) => backgroundErrors.push(e)), clock: now }),
  ],
];

describe.each(stores)('store contract: %s', (_name, createStore) => {
  it.each(cases)('%s', async (_case, steps) => {
    // A whole hour ahead of now: fixed windows start on it, and absolute expiries set in
    // Redis (a quota's) lie in the future.
    const start = (Math.floor(Date.now() / 3_600_000) + 1) * 3_600_000;
    const clock = manualClock(start);
    const prefix = uniqueId('conformance');
    const scope: Scope = {
      id: (name) => {
        const id = `${prefix}-${name}`;
        used.push(limiterKey(id, 'log'), limiterKey(id, 'smooth'), limiterKey(id, 'sentinel'), quotaKey(id));
        return id;
      },
      start,
    };
    const store = createStore(clock.now);
    store.configure(settings);
    try {
      for (const step of steps) {
        clock.set(start + step.at);
        const results = step.peek ? await store.peek(step.ops(scope)) : await store.run(step.ops(scope), step.refused ?? false);
        const relative = results.map((r) => ({ ...r, resetMs: r.resetMs === 0 ? 0 : r.resetMs - start }));
        expect(relative, `at +${step.at} ms`).toEqual(typeof step.expect === 'function' ? step.expect(start) : step.expect);
      }
    } finally {
      await store.close();
    }
    expect(backgroundErrors).toEqual([]);
  });
});
