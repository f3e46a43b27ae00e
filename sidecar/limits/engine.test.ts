import { setTimeout as sleep } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import type { CompiledConfig } from '../../crds/compiled.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import { createLimitEngine } from './engine.ts';
import { createLimitBackends } from './backends.ts';
import { api, config, policy, session } from '../../test/support/compiled-fixtures.ts';
import { collectingSink, manualClock, request, silentLogger } from '../../test/support/limits-fixtures.ts';
import type { LimitEngine, LimitRequest } from './types.ts';

const engines: LimitEngine[] = [];
const memoryBackends = () => createLimitBackends({ instanceId: 't', logger: silentLogger });
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
});

function setup(cfg: CompiledConfig, clock = manualClock()) {
  const sink = collectingSink();
  const registry = new Registry();
  const engine = createLimitEngine({
    config: cfg,
    backends: createLimitBackends({ instanceId: 'unit', logger: silentLogger, registry, now: clock.now }),
    events: sink,
    logger: silentLogger,
    registry,
    now: clock.now,
  });
  engines.push(engine);
  const outcomes = async (req: LimitRequest, n: number): Promise<string[]> => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) out.push((await engine.decide(req)).outcome);
    return out;
  };
  return { engine, clock, sink, registry, outcomes };
}

const algorithms: [string, Partial<GatewaySettings>][] = [
  ['sliding log', { enable_redis_rolling_limiter: true }],
  ['sentinel', { enable_sentinel_rate_limiter: true }],
  ['fixed window', { enable_fixed_window_rate_limiter: true }],
  ['drl', {}],
];

describe('every algorithm (in-memory store)', () => {
  it.each(algorithms)('%s admits exactly rate, then refuses with api_rate_limited', async (_name, settings) => {
    const a = api('a', { api_limit: { rate: 3, per: 10 } });
    const { outcomes } = setup(config({ settings, apis: [a] }));
    expect(await outcomes(request(a, null), 5)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited', 'api_rate_limited']);
  });
});

describe('decide', () => {
  it('answers a request with nothing to count at once, and one that meets a limit with a promise', async () => {
    const open = api('open');
    const limited = api('limited', { api_limit: { rate: 1, per: 10 } });
    const { engine } = setup(config({ settings: { enable_redis_rolling_limiter: true }, apis: [open, limited] }));
    const free = engine.decide(request(open, null));
    expect(free).not.toBeInstanceOf(Promise);
    expect(free).toEqual({ outcome: 'allowed', rate: null, quota: null });
    const counted = engine.decide(request(limited, null));
    expect(counted).toBeInstanceOf(Promise);
    expect((await counted).outcome).toBe('allowed');
    expect((await engine.decide(request(limited, null))).outcome).toBe('api_rate_limited');
  });

  it('answers a request that meets only DRL limits at once too: it is decided in process', () => {
    const limited = api('limited', { api_limit: { rate: 1, per: 10 } });
    const { engine } = setup(config({ apis: [limited] }));
    const first = engine.decide(request(limited, null));
    const second = engine.decide(request(limited, null));
    expect(first).not.toBeInstanceOf(Promise);
    expect(second).not.toBeInstanceOf(Promise);
    expect([first, second].map((d) => (d as Awaited<typeof d>).outcome)).toEqual(['allowed', 'api_rate_limited']);
  });
});

describe('sliding log', () => {
  it('spike arrest: blocked requests are logged, traffic resumes only after a quiet window', async () => {
    const a = api('a', { api_limit: { rate: 2, per: 1 } });
    const { outcomes, clock } = setup(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }));
    const req = request(a, null);
    expect(await outcomes(req, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    // Keep knocking every 400 ms: the log never empties below the rate.
    for (let i = 0; i < 5; i++) {
      clock.advance(400);
      expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    }
    clock.advance(1000);
    expect(await outcomes(req, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });

  it('header data: limit, remaining, reset of the oldest entry + per', async () => {
    const clock = manualClock(1_000_000);
    const a = api('a', { api_limit: { rate: 3, per: 2 } });
    const { engine } = setup(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }), clock);
    expect((await engine.decide(request(a, null))).rate).toEqual({ limit: 3, remaining: 2, reset: 1002 });
    clock.advance(500);
    expect((await engine.decide(request(a, null))).rate).toEqual({ limit: 3, remaining: 1, reset: 1002 });
  });
});

describe('sentinel', () => {
  it('blocks for per from the moment the limit is reached', async () => {
    const a = api('a', { api_limit: { rate: 2, per: 1 } });
    const { outcomes, clock } = setup(config({ settings: { enable_sentinel_rate_limiter: true }, apis: [a] }));
    const req = request(a, null);
    expect(await outcomes(req, 1)).toEqual(['allowed']);
    clock.advance(500);
    expect(await outcomes(req, 2)).toEqual(['allowed', 'api_rate_limited']);
    clock.advance(999); // the first entry has left the window, but the sentinel still blocks
    expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    clock.advance(1);
    expect(await outcomes(req, 1)).toEqual(['allowed']);
  });

  it('logs its refusals, so a caller that keeps knocking finds the window full when the flag ends', async () => {
    const a = api('a', { api_limit: { rate: 2, per: 1 } });
    const { outcomes, clock } = setup(config({ settings: { enable_sentinel_rate_limiter: true }, apis: [a] }));
    const req = request(a, null);
    expect(await outcomes(req, 2)).toEqual(['allowed', 'allowed']);
    clock.advance(500);
    expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    clock.advance(400);
    expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    // The flag ends at 1000, but the two refusals are in the window: a new flag, until 2000.
    clock.advance(100);
    expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    clock.advance(999);
    expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    // A quiet window after the last knock.
    clock.advance(1001);
    expect(await outcomes(req, 2)).toEqual(['allowed', 'allowed']);
  });
});

describe('fixed window', () => {
  it('windows are aligned to per and the counter restarts at the boundary', async () => {
    const clock = manualClock(10_000 * 1000 - 100); // 100 ms before a 10 s boundary
    const a = api('a', { api_limit: { rate: 2, per: 10 } });
    const { engine, outcomes } = setup(config({ settings: { enable_fixed_window_rate_limiter: true }, apis: [a] }), clock);
    const req = request(a, null);
    expect((await engine.decide(req)).rate).toEqual({ limit: 2, remaining: 1, reset: 10_000 });
    expect(await outcomes(req, 2)).toEqual(['allowed', 'api_rate_limited']);
    clock.advance(100);
    expect(await outcomes(req, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });
});

describe('drl_threshold (one gateway without Redis)', () => {
  it.each([
    // 10 req/s > threshold 5 x 1 gateway: DRL, a bucket that refills continuously
    [10, 5, 'drl'],
    // 10 req/s <= threshold 10 x 1: sliding log
    [10, 10, 'sliding_log'],
  ])('rate %i per 1 s, threshold %i -> %s', async (rate, threshold, algorithm) => {
    const a = api('a', { api_limit: { rate, per: 1 } });
    const { outcomes, registry } = setup(config({ settings: { drl_threshold: threshold }, apis: [a] }));
    await outcomes(request(a, null), rate + 1);
    const metric = await registry.getSingleMetric('gw_limit_decisions_total')!.get();
    const labels = metric.values.map((v) => [v.labels.algorithm, v.labels.outcome, v.value]);
    expect(labels).toEqual(
      expect.arrayContaining([
        [algorithm, 'allowed', rate],
        [algorithm, 'api_rate_limited', 1],
      ]),
    );
  });
});

describe('scopes and order', () => {
  const epLimit = { path: '/slow', pattern: '^/slow$', method: 'GET', rate: 1, per: 10 };
  const keyed = { session: session({ rate: 3, per: 10 }), raw: 'key-1' };
  const settings = { enable_redis_rolling_limiter: true };

  it.each([
    ['API per-endpoint limit first', { api_limit: { rate: 5, per: 10 }, endpoint_limits: [epLimit] }, '/slow', ['allowed', 'api_rate_limited']],
    ['other endpoints fall back to the API limit (then the key limit)', { api_limit: { rate: 5, per: 10 }, endpoint_limits: [epLimit] }, '/fast', ['allowed', 'allowed', 'allowed', 'key_rate_limited']],
    ['API limit tighter than the key limit', { api_limit: { rate: 2, per: 10 } }, '/', ['allowed', 'allowed', 'api_rate_limited']],
    ['disabled API limit keeps the key limit', { api_limit: null }, '/', ['allowed', 'allowed', 'allowed', 'key_rate_limited']],
  ])('%s', async (_name, overrides, path, expected) => {
    const a = api('a', overrides);
    const { outcomes } = setup(config({ settings, apis: [a] }));
    expect(await outcomes(request(a, keyed, 'GET', path), expected.length)).toEqual(expected);
  });

  it('a request refused at the API level consumes no key-level allowance', async () => {
    const a = api('a', { api_limit: { rate: 1, per: 10 } });
    const b = api('b');
    const caller = { session: session({ rate: 2, per: 10 }), raw: 'k' };
    const { outcomes } = setup(config({ settings, apis: [a, b] }));
    expect(await outcomes(request(a, caller), 4)).toEqual(['allowed', 'api_rate_limited', 'api_rate_limited', 'api_rate_limited']);
    // The key's global allowance (shared with b) has 1 use, not 4.
    expect(await outcomes(request(b, caller), 2)).toEqual(['allowed', 'key_rate_limited']);
  });

  it('a policy global allowance is shared by all the APIs it grants, per key', async () => {
    const right = (id: string) => ({ api_id: id, api_name: id, limit: null, endpoints: [] });
    const p = policy('gold', { rate: { rate: 3, per: 10 }, access_rights: { a: right('a'), b: right('b') } });
    const a = api('a');
    const b = api('b');
    const { outcomes } = setup(config({ settings, apis: [a, b], policies: [p] }));
    const one = { session: session({ apply_policies: ['gold'] }), raw: 'one' };
    const two = { session: session({ apply_policies: ['gold'] }), raw: 'two' };
    expect(await outcomes(request(a, one), 2)).toEqual(['allowed', 'allowed']);
    expect(await outcomes(request(b, one), 2)).toEqual(['allowed', 'key_rate_limited']);
    expect(await outcomes(request(a, two), 3)).toEqual(['allowed', 'allowed', 'allowed']);
  });

  it('per-API and per-endpoint key allowances are independent per API and per endpoint', async () => {
    const limit = { rate: { rate: 2, per: 10 }, quota_max: -1, quota_renewal_rate: 0, throttle_interval: 0, throttle_retry_limit: 0, smoothing: null };
    const p = policy('silver', {
      rate: { rate: 100, per: 10 },
      access_rights: {
        a: { api_id: 'a', api_name: 'a', limit, endpoints: [{ path: '/x', pattern: '^/x$', method: 'GET', rate: 1, per: 10 }] },
        b: { api_id: 'b', api_name: 'b', limit, endpoints: [] },
      },
    });
    const a = api('a');
    const b = api('b');
    const { outcomes } = setup(config({ settings, apis: [a, b], policies: [p] }));
    const caller = { session: session({ apply_policies: ['silver'] }), raw: 'k' };
    expect(await outcomes(request(a, caller, 'GET', '/x'), 2)).toEqual(['allowed', 'key_rate_limited']);
    expect(await outcomes(request(a, caller, 'GET', '/y'), 3)).toEqual(['allowed', 'allowed', 'key_rate_limited']);
    expect(await outcomes(request(b, caller), 3)).toEqual(['allowed', 'allowed', 'key_rate_limited']);
  });

  it('with several policies the highest rate/per applies', async () => {
    const slow = policy('slow', { rate: { rate: 1, per: 10 } });
    const fast = policy('fast', { rate: { rate: 3, per: 10 } });
    const a = api('a');
    const { outcomes } = setup(config({ settings, apis: [a], policies: [slow, fast] }));
    const caller = { session: session({ apply_policies: ['slow', 'fast'] }), raw: 'k' };
    expect(await outcomes(request(a, caller), 4)).toEqual(['allowed', 'allowed', 'allowed', 'key_rate_limited']);
  });

  it('updateConfig applies an edited policy to existing keys', async () => {
    const a = api('a');
    const before = config({ settings, apis: [a], policies: [policy('p', { rate: { rate: 1, per: 10 } })] });
    const { engine, outcomes } = setup(before);
    const caller = { session: session({ apply_policies: ['p'] }), raw: 'k' };
    expect(await outcomes(request(a, caller), 2)).toEqual(['allowed', 'key_rate_limited']);
    engine.updateConfig(config({ settings, apis: [a], policies: [policy('p', { rate: { rate: 5, per: 10 } })] }));
    expect(await outcomes(request(a, caller), 1)).toEqual(['allowed']);
  });

  it('updateConfig applies an edited API limit, and an API the change left alone keeps counting where it was', async () => {
    const edited = api('edited', { api_limit: { rate: 1, per: 10 } });
    const untouched = api('untouched', { api_limit: { rate: 2, per: 10 } });
    const { engine, outcomes } = setup(config({ settings, apis: [edited, untouched] }));
    const caller = { session: session({ rate: 100, per: 10 }), raw: 'k' };
    expect(await outcomes(request(edited, caller), 1)).toEqual(['allowed']);
    expect(await outcomes(request(untouched, caller), 1)).toEqual(['allowed']);
    // A config change compiles an edited API to a new object and hands an unchanged one over as it was.
    const raised = api('edited', { api_limit: { rate: 3, per: 10 } });
    engine.updateConfig(config({ settings, apis: [raised, untouched] }));
    expect(await outcomes(request(raised, caller), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    expect(await outcomes(request(untouched, caller), 2)).toEqual(['allowed', 'api_rate_limited']);
  });
});

describe('a refused request consumes nothing at the levels that admitted it (in-memory store)', () => {
  const greedy = (rate: number, extra: Record<string, unknown> = {}) => ({ session: session({ rate, per: 10, ...extra }), raw: 'greedy' });
  const polite = { session: session({ rate: 100, per: 10 }), raw: 'polite' };

  it.each(algorithms)('%s: key-level refusals leave the API allowance to the other keys', async (_name, settings) => {
    const a = api('a', { api_limit: { rate: 4, per: 10 } });
    const { outcomes } = setup(config({ settings, apis: [a] }));
    expect(await outcomes(request(a, greedy(2)), 5)).toEqual(['allowed', 'allowed', 'key_rate_limited', 'key_rate_limited', 'key_rate_limited']);
    expect(await outcomes(request(a, polite), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });

  it.each(algorithms)('%s: a refused quota gives the rate allowances back', async (_name, settings) => {
    const a = api('a', { api_limit: { rate: 3, per: 10 } });
    const { outcomes } = setup(config({ settings, apis: [a] }));
    const quota = greedy(2, { quota_max: 1, quota_renewal_rate: 3600 });
    expect(await outcomes(request(a, quota), 3)).toEqual(['allowed', 'quota_exceeded', 'quota_exceeded']);
    // The key's own allowance of 2 still has 1 left, and the API's 3 have 2 left.
    expect(await outcomes(request(a, quota), 1)).toEqual(['quota_exceeded']);
    expect(await outcomes(request(a, polite), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });

  it.each(algorithms)('%s: when both levels refuse, the API answer wins and the key level is not touched', async (_name, settings) => {
    const a = api('a', { api_limit: { rate: 1, per: 10 } });
    const b = api('b');
    const { outcomes } = setup(config({ settings, apis: [a, b] }));
    const caller = greedy(2, { quota_max: 5, quota_renewal_rate: 3600 });
    expect(await outcomes(request(a, caller), 3)).toEqual(['allowed', 'api_rate_limited', 'api_rate_limited']);
    // The key's global allowance (shared with b) and its quota were charged once.
    expect(await outcomes(request(b, caller), 2)).toEqual(['allowed', 'key_rate_limited']);
  });

  it('sliding log: the refusing level still logs its refusals (spike arrest at the key), the API level does not', async () => {
    const a = api('a', { api_limit: { rate: 3, per: 1 } });
    const { outcomes, clock } = setup(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }));
    const knocking = { session: session({ rate: 1, per: 1 }), raw: 'knocking' };
    expect(await outcomes(request(a, knocking), 2)).toEqual(['allowed', 'key_rate_limited']);
    clock.advance(600);
    // The first entry is still in the key's window: the knock is refused, and logged.
    expect(await outcomes(request(a, knocking), 1)).toEqual(['key_rate_limited']);
    clock.advance(600);
    expect(await outcomes(request(a, knocking), 1)).toEqual(['key_rate_limited']);
    // Only the one admitted request counts at the API level (window: the last second).
    expect(await outcomes(request(a, polite), 4)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
  });

  it('drl_threshold: a key refused by its DRL bucket takes nothing from the API sliding log', async () => {
    // API 10 per 10 s (1/s <= 5: sliding log); key 8 per 1 s (8/s > 5: DRL).
    const a = api('a', { api_limit: { rate: 10, per: 10 } });
    const { outcomes } = setup(config({ settings: { drl_threshold: 5 }, apis: [a] }));
    const fast = { session: session({ rate: 8, per: 1 }), raw: 'fast' };
    expect(await outcomes(request(a, fast), 10)).toEqual([...Array(8).fill('allowed'), 'key_rate_limited', 'key_rate_limited']);
    expect(await outcomes(request(a, polite), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });

  it('drl_threshold: API DRL tokens are given back when the key sliding log refuses', async () => {
    // API 100 per 1 s (100/s > 5: DRL); key 2 per 10 s (0.2/s <= 5: sliding log).
    const a = api('a', { api_limit: { rate: 100, per: 1 } });
    const { outcomes } = setup(config({ settings: { drl_threshold: 5 }, apis: [a] }));
    expect(await outcomes(request(a, greedy(2)), 5)).toEqual(['allowed', 'allowed', 'key_rate_limited', 'key_rate_limited', 'key_rate_limited']);
    const many = await outcomes(request(a, polite), 99);
    expect(many.filter((o) => o === 'allowed')).toHaveLength(98);
    expect(many.at(-1)).toBe('api_rate_limited');
  });
});

describe('custom rate-limit keys', () => {
  const settings = { enable_redis_rolling_limiter: true };
  const p = policy('by-org', { rate: { rate: 2, per: 10 }, quota_max: 3, rate_limit_pattern: '$gw_meta.org|$gw_meta.team' });

  it.each([
    ['same pattern value: one shared allowance', { org: 'acme', team: 'x' }, { org: 'acme', team: 'x' }, ['allowed', 'allowed', 'key_rate_limited', 'key_rate_limited']],
    ['different values: separate allowances', { org: 'acme', team: 'x' }, { org: 'acme', team: 'y' }, ['allowed', 'allowed', 'allowed', 'allowed']],
    ['missing metadata: back to the credential', { org: 'acme' }, { org: 'acme' }, ['allowed', 'allowed', 'allowed', 'allowed']],
  ])('%s', async (_name, metaOne, metaTwo, expected) => {
    const a = api('a');
    const { outcomes } = setup(config({ settings, apis: [a], policies: [p] }));
    const one = { session: session({ apply_policies: ['by-org'], meta_data: metaOne }), raw: 'one' };
    const two = { session: session({ apply_policies: ['by-org'], meta_data: metaTwo }), raw: 'two' };
    const results = [...(await outcomes(request(a, one), 2)), ...(await outcomes(request(a, two), 2))];
    expect(results).toEqual(expected);
  });

  it('the pattern value keys the quota too', async () => {
    const a = api('a');
    const { outcomes, clock } = setup(config({ settings, apis: [a], policies: [p] }));
    const meta = { org: 'acme', team: 'x' };
    const one = { session: session({ apply_policies: ['by-org'], meta_data: meta }), raw: 'one' };
    const two = { session: session({ apply_policies: ['by-org'], meta_data: meta }), raw: 'two' };
    expect(await outcomes(request(a, one), 2)).toEqual(['allowed', 'allowed']);
    clock.advance(10_000);
    expect(await outcomes(request(a, two), 2)).toEqual(['allowed', 'quota_exceeded']);
  });
});

describe('quotas', () => {
  const settings = { enable_redis_rolling_limiter: true };

  it.each([
    ['renewing quota', { quota_max: 2, quota_renewal_rate: 60 }, ['allowed', 'allowed', 'quota_exceeded'], 60_000, 'allowed'],
    ['never-renewing quota', { quota_max: 2, quota_renewal_rate: 0 }, ['allowed', 'allowed', 'quota_exceeded'], 10 * 86_400_000, 'quota_exceeded'],
    ['unlimited (0)', { quota_max: 0 }, ['allowed', 'allowed', 'allowed'], 0, 'allowed'],
    ['unlimited (-1)', { quota_max: -1 }, ['allowed', 'allowed', 'allowed'], 0, 'allowed'],
  ])('%s', async (_name, fields, first, wait, after) => {
    const a = api('a');
    const { outcomes, clock } = setup(config({ settings, apis: [a] }));
    const caller = { session: session(fields), raw: 'k' };
    expect(await outcomes(request(a, caller), first.length)).toEqual(first);
    clock.advance(wait);
    expect(await outcomes(request(a, caller), 1)).toEqual([after]);
  });

  it('quota data: limit, remaining, renewal time; quota_remaining and quota_renews seed the state', async () => {
    const clock = manualClock(1_000_000);
    const a = api('a');
    const { engine, outcomes } = setup(config({ settings, apis: [a] }), clock);
    const caller = { session: session({ quota_max: 10, quota_renewal_rate: 3600, quota_remaining: 2, quota_renews: 1500 }), raw: 'k' };
    expect((await engine.decide(request(a, caller))).quota).toEqual({ limit: 10, remaining: 1, reset: 1500 });
    expect(await outcomes(request(a, caller), 2)).toEqual(['allowed', 'quota_exceeded']);
    clock.set(1_500_000);
    expect((await engine.decide(request(a, caller))).quota).toEqual({ limit: 10, remaining: 9, reset: 1500 + 3600 });
  });

  it("a key's own quota_remaining of 0 in a current period lets nothing through until it renews", async () => {
    const clock = manualClock(1_000_000);
    const a = api('a');
    const { engine, outcomes } = setup(config({ settings, apis: [a] }), clock);
    const caller = { session: session({ quota_max: 3, quota_renewal_rate: 60, quota_remaining: 0, quota_renews: 1060 }), raw: 'k' };
    expect(await outcomes(request(a, caller), 2)).toEqual(['quota_exceeded', 'quota_exceeded']);
    clock.set(1_060_000);
    expect((await engine.decide(request(a, caller))).quota).toEqual({ limit: 3, remaining: 2, reset: 1060 + 60 });
  });

  it("a policy's quota runs its first period from the session's making, then from the first request after it", async () => {
    const clock = manualClock(1_000_000);
    const a = api('a');
    const p = policy('monthly', { quota_max: 3, quota_renewal_rate: 60 });
    const { engine } = setup(config({ settings, apis: [a], policies: [p] }), clock);
    const made = (secondsAgo: number) => new Date(1_000_000 - secondsAgo * 1000).toISOString();
    const recent = { session: session({ apply_policies: ['monthly'], date_created: made(45) }), raw: 'recent' };
    expect((await engine.decide(request(a, recent))).quota).toEqual({ limit: 3, remaining: 2, reset: 1000 - 45 + 60 });
    const older = { session: session({ apply_policies: ['monthly'], date_created: made(90) }), raw: 'older' };
    expect((await engine.decide(request(a, older))).quota).toEqual({ limit: 3, remaining: 2, reset: 1000 + 60 });
  });

  it('a rate-limited request consumes no quota', async () => {
    const a = api('a');
    const { outcomes, clock } = setup(config({ settings, apis: [a] }));
    const caller = { session: session({ rate: 1, per: 1, quota_max: 2, quota_renewal_rate: 3600 }), raw: 'k' };
    expect(await outcomes(request(a, caller), 5)).toEqual(['allowed', 'key_rate_limited', 'key_rate_limited', 'key_rate_limited', 'key_rate_limited']);
    clock.advance(1000);
    expect(await outcomes(request(a, caller), 1)).toEqual(['allowed']);
    clock.advance(1000);
    expect(await outcomes(request(a, caller), 1)).toEqual(['quota_exceeded']);
  });

  it.each(algorithms)("%s: a request the quota refuses shows the rate limit it gave back, remaining and reset as before it", async (_name, algorithm) => {
    const a = api('a');
    const { engine } = setup(config({ settings: algorithm, apis: [a] }));
    // A token of the DRL's takes 10 s to come back, so a reset counting it would show.
    const caller = { session: session({ rate: 100, per: 1000, quota_max: 1, quota_renewal_rate: 3600 }), raw: 'k' };
    const admitted = (await engine.decide(request(a, caller))).rate;
    expect(admitted).toMatchObject({ limit: 100, remaining: 99 });
    for (let i = 0; i < 2; i++) {
      const refused = await engine.decide(request(a, caller));
      expect(refused.outcome).toBe('quota_exceeded');
      expect(refused.rate).toEqual(admitted);
    }
    const peeked = await engine.explain(request(a, caller));
    expect(peeked.limits[0]!.held).toMatchObject({ count: 1, remaining: 99 });
  });

  it('a request refused by the API limit consumes no quota', async () => {
    const a = api('a', { api_limit: { rate: 1, per: 1 } });
    const { outcomes, clock } = setup(config({ settings, apis: [a] }));
    const caller = { session: session({ quota_max: 1, quota_renewal_rate: 3600 }), raw: 'k' };
    expect(await outcomes(request(a, caller), 3)).toEqual(['allowed', 'api_rate_limited', 'api_rate_limited']);
    clock.advance(1000);
    expect(await outcomes(request(a, caller), 1)).toEqual(['quota_exceeded']);
  });
});

describe('throttling (real clock)', () => {
  const settings = { enable_redis_rolling_limiter: true };
  const a = api('a');
  const throttled = { session: session({ rate: 1, per: 1, throttle_interval: 1, throttle_retry_limit: 2 }), raw: 'k' };

  it('waits and retries internally, then passes', async () => {
    const engine = createLimitEngine({ config: config({ settings, apis: [a] }), backends: memoryBackends(), events: collectingSink(), logger: silentLogger });
    engines.push(engine);
    expect((await engine.decide(request(a, throttled))).outcome).toBe('allowed');
    const started = Date.now();
    expect((await engine.decide(request(a, throttled))).outcome).toBe('allowed');
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it('gives up with the rate-limit outcome after the retry limit', async () => {
    const tight = { session: session({ rate: 1, per: 5, throttle_interval: 1, throttle_retry_limit: 1 }), raw: 'k' };
    const engine = createLimitEngine({ config: config({ settings, apis: [a] }), backends: memoryBackends(), events: collectingSink(), logger: silentLogger });
    engines.push(engine);
    await engine.decide(request(a, tight));
    const started = Date.now();
    expect((await engine.decide(request(a, tight))).outcome).toBe('key_rate_limited');
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(900);
    expect(waited).toBeLessThan(1900);
  });

  it('gives up with the headers of the limit as it is then, not as its first evaluation found it', async () => {
    const tight = { session: session({ rate: 1, per: 1, throttle_interval: 1, throttle_retry_limit: 1 }), raw: 'k' };
    const engine = createLimitEngine({ config: config({ settings, apis: [a] }), backends: memoryBackends(), events: collectingSink(), logger: silentLogger });
    engines.push(engine);
    expect((await engine.decide(request(a, tight))).outcome).toBe('allowed');
    await sleep(500);
    // Refused, so it waits a second for its one retry.
    const givingUp = engine.decide(request(a, tight));
    await sleep(600);
    // The first request has left the window: another takes the room before the retry comes.
    const tookRoomAt = Date.now();
    expect((await engine.decide(request(a, tight))).outcome).toBe('allowed');
    const gaveUp = await givingUp;
    expect(gaveUp.outcome).toBe('key_rate_limited');
    // The window that refused the retry ends a second after the request that took the room,
    // where the first evaluation's ended a second after the first request.
    expect(gaveUp.rate?.limit).toBe(1);
    expect(gaveUp.rate?.remaining).toBe(0);
    expect(gaveUp.rate!.reset).toBeGreaterThanOrEqual(Math.ceil((tookRoomAt + 1000) / 1000));
  });

  it.each([
    ['throttle_max_wait_ms', { ...settings, throttle_max_wait_ms: 500 }, undefined],
    ['an aborted request', settings, AbortSignal.timeout(50)],
  ])('is bounded by %s', async (_name, bounded, signal) => {
    const engine = createLimitEngine({ config: config({ settings: bounded, apis: [a] }), backends: memoryBackends(), events: collectingSink(), logger: silentLogger });
    engines.push(engine);
    await engine.decide(request(a, throttled));
    const started = Date.now();
    expect((await engine.decide(request(a, throttled), signal)).outcome).toBe('key_rate_limited');
    expect(Date.now() - started).toBeLessThan(400);
  });
});

describe('smoothing on the sliding log', () => {
  const smoothing = { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 1 };
  const settings = { enable_redis_rolling_limiter: true };

  it('raises the allowance under load, lowers it when load falls, one event per change, within bounds', async () => {
    const a = api('a', { api_limit: { rate: 6, per: 2 }, smoothing });
    const { outcomes, clock, sink, registry } = setup(config({ settings, apis: [a] }));
    const req = request(a, null);
    // Allowance 2; the 3rd request sees 2 in the window (> 2 − 1) and raises it to 4.
    expect(await outcomes(req, 5)).toEqual(['allowed', 'allowed', 'allowed', 'allowed', 'api_rate_limited']);
    expect(sink.events.map((e) => [e.reason, e.oldAllowance, e.newAllowance])).toEqual([['RateLimitSmoothingUp', 2, 4]]);
    // Hold-off: no second event within `delay`, whatever the load.
    clock.advance(999);
    expect(await outcomes(req, 1)).toEqual(['api_rate_limited']);
    expect(sink.events).toHaveLength(1);
    clock.advance(1);
    // 6 in the window (> 4 − 1): up to 6, the rate, and no higher; 6 are already logged.
    expect(await outcomes(req, 3)).toEqual(['api_rate_limited', 'api_rate_limited', 'api_rate_limited']);
    expect(sink.events.map((e) => e.newAllowance)).toEqual([4, 6]);
    // Quiet windows: down by step each time, to threshold and no lower.
    for (let i = 0; i < 3; i++) {
      clock.advance(2000);
      expect(await outcomes(req, 1)).toEqual(['allowed']);
    }
    expect(sink.events.map((e) => [e.reason, e.newAllowance])).toEqual([
      ['RateLimitSmoothingUp', 4],
      ['RateLimitSmoothingUp', 6],
      ['RateLimitSmoothingDown', 4],
      ['RateLimitSmoothingDown', 2],
    ]);
    expect(sink.events[0]).toMatchObject({ source: a.source, limiterKey: 'a:a' });
    const metric = await registry.getSingleMetric('gw_smoothing_events_total')!.get();
    expect(Object.fromEntries(metric.values.map((v) => [v.labels.reason, v.value]))).toEqual({
      RateLimitSmoothingUp: 2,
      RateLimitSmoothingDown: 2,
    });
  });

  it('key-level smoothing names the policy and a hashed identity, never the raw key', async () => {
    const p = policy('smooth', { rate: { rate: 10, per: 1 }, smoothing });
    const a = api('a');
    const { outcomes, sink } = setup(config({ settings, apis: [a], policies: [p] }));
    const raw = 'raw-secret-key';
    await outcomes(request(a, { session: session({ apply_policies: ['smooth'] }), raw }), 3);
    expect(sink.events).toHaveLength(1);
    expect(sink.events[0]!.source).toEqual(p.source);
    expect(sink.events[0]!.limiterKey).toMatch(/^k:[0-9a-f]{64}:default\/smooth$/);
    expect(JSON.stringify(sink.events)).not.toContain(raw);
  });

  it('is ignored by the other algorithms', async () => {
    const a = api('a', { api_limit: { rate: 6, per: 1 }, smoothing });
    const { outcomes, sink } = setup(config({ settings: { enable_fixed_window_rate_limiter: true }, apis: [a] }));
    expect(await outcomes(request(a, null), 7)).toEqual([...Array(6).fill('allowed'), 'api_rate_limited']);
    expect(sink.events).toEqual([]);
  });

  it.each([
    ['sliding log', settings, 'sliding_log', smoothing, null],
    ['fixed window', { enable_fixed_window_rate_limiter: true }, 'fixed_window', null, smoothing],
    ['sentinel', { enable_sentinel_rate_limiter: true }, 'sentinel', null, smoothing],
    ['DRL', {}, 'drl', null, smoothing],
  ])('the limits read under the %s shows the smoothing in force, or as unused', async (_name, algorithm, name, inForce, unused) => {
    const a = api('a', { api_limit: { rate: 6, per: 1 }, smoothing });
    const { engine } = setup(config({ settings: algorithm, apis: [a] }));
    const explained = await engine.explain(request(a, null));
    expect(explained.limits.map((l) => [l.algorithm, l.smoothing, l.unusedSmoothing])).toEqual([[name, inForce, unused]]);
  });
});

describe('keyless requests', () => {
  it('meet only API-level limits and get no quota data', async () => {
    const a = api('a', { keyless: true });
    const { engine } = setup(config({ apis: [a] }));
    expect(await engine.decide(request(a, null))).toEqual({ outcome: 'allowed', rate: null, quota: null });
  });
});

describe('explain: the limits a request meets, read without counting', () => {
  const settings = { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' as const };
  const keyLimit = (rate: number) => ({ rate: { rate, per: 60 }, quota_max: -1, quota_renewal_rate: 0, throttle_interval: 0, throttle_retry_limit: 0, smoothing: null });
  const apiEndpoint = { path: '/orders/{id}', pattern: '^/orders/([^/]+)$', method: 'GET', rate: 50, per: 60 };
  const keyEndpoint = (rate: number) => ({ path: '/orders/{id}', pattern: '^/orders/([^/]+)$', method: 'GET', rate, per: 60 });
  const right = (endpoints: ReturnType<typeof keyEndpoint>[], limit: ReturnType<typeof keyLimit> | null = null) => ({ api_id: 'a', api_name: 'a', limit, endpoints });

  it('names each level that applies, what it replaced and the policies it was chosen over', async () => {
    const a = api('a', { api_limit: { rate: 100, per: 60 }, endpoint_limits: [apiEndpoint] });
    const gold = policy('gold', { rate: { rate: 30, per: 60 }, access_rights: { a: right([keyEndpoint(3)]) }, quota_max: 10, quota_renewal_rate: 3600 });
    const silver = policy('silver', { rate: { rate: 10, per: 60 }, access_rights: { a: right([keyEndpoint(2)]) }, quota_max: 5, quota_renewal_rate: 3600 });
    const { engine, clock } = setup(config({ settings, apis: [a], policies: [silver, gold] }));
    const caller = { session: session({ apply_policies: ['silver', 'gold'] }), raw: 'k' };
    const req = request(a, caller, 'GET', '/orders/7');
    await engine.decide(req);
    clock.advance(1000);
    const explained = await engine.explain(req);
    expect(explained.limits.map(({ scope, source, rate, algorithm, held }) => ({ scope, source, rate, algorithm, count: held?.count, limit: held?.limit, remaining: held?.remaining }))).toEqual([
      { scope: 'api_endpoint', source: { resource: a.source, rule: 'GET /orders/{id}' }, rate: 50, algorithm: 'sliding_log', count: 1, limit: 50, remaining: 49 },
      { scope: 'key_endpoint', source: { resource: gold.source, rule: 'GET /orders/{id}' }, rate: 3, algorithm: 'sliding_log', count: 1, limit: 3, remaining: 2 },
    ]);
    expect(explained.limits[0]!.held?.resetMs).toBe(Date.UTC(2030, 0, 1) + 60_000);
    expect(explained.passedOver).toEqual([
      { scope: 'api', source: { resource: a.source, rule: null }, rate: 100, per: 60 },
      { scope: 'key_global', source: { resource: gold.source, rule: null }, rate: 30, per: 60 },
    ]);
    // Silver's own rate lost to gold's, which the endpoint's limit then replaced: it is named too.
    expect(explained.outranked).toEqual([
      { scope: 'key_endpoint', source: { resource: silver.source, rule: 'GET /orders/{id}' }, rate: 2, per: 60 },
      { scope: 'key_global', source: { resource: silver.source, rule: null }, rate: 10, per: 60 },
    ]);
    expect(explained.quota).toMatchObject({ source: gold.source, max: 10, renewal: 3600, used: 1, remaining: 9 });
    expect([explained.outcome, explained.refusedBy]).toEqual(['allowed', null]);
  });

  it('takes nothing: the requests after it meet the same allowance', async () => {
    const a = api('a', { api_limit: { rate: 2, per: 60 } });
    const { engine, outcomes } = setup(config({ settings, apis: [a] }));
    for (let i = 0; i < 5; i++) await engine.explain(request(a, null));
    expect(await outcomes(request(a, null), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });

  it.each([
    ['sliding log', { enable_redis_rolling_limiter: true }],
    ['sentinel', { enable_sentinel_rate_limiter: true }],
    ['fixed window', { enable_fixed_window_rate_limiter: true }],
  ])('%s: after a refusal it names the refusing level with the figures of the refusal', async (_name, algorithm) => {
    const a = api('a');
    const p = policy('p', { rate: { rate: 10, per: 60 }, access_rights: { a: right([], keyLimit(2)) } });
    const { engine } = setup(config({ settings: { ...algorithm, rate_limit_response_headers: 'rate_limits' }, apis: [a], policies: [p] }));
    const req = request(a, { session: session({ apply_policies: ['p'] }), raw: 'k' });
    await engine.decide(req);
    await engine.decide(req);
    const refused = await engine.decide(req);
    expect(refused.outcome).toBe('key_rate_limited');
    const explained = await engine.explain(req);
    expect([explained.outcome, explained.refusedBy]).toEqual(['key_rate_limited', 'key_per_api']);
    const held = explained.limits[0]!.held!;
    expect({ limit: held.limit, remaining: held.remaining, reset: Math.ceil(held.resetMs / 1000) }).toEqual(refused.rate);
  });

  it('a quota used up is the refusing level once every rate limit passes', async () => {
    const a = api('a');
    const caller = { session: session({ rate: 100, per: 60, quota_max: 2, quota_renewal_rate: 3600 }), raw: 'k' };
    const { engine, outcomes } = setup(config({ settings, apis: [a] }));
    expect(await outcomes(request(a, caller), 3)).toEqual(['allowed', 'allowed', 'quota_exceeded']);
    const explained = await engine.explain(request(a, caller));
    expect([explained.outcome, explained.refusedBy]).toEqual(['quota_exceeded', 'quota']);
    expect(explained.quota).toMatchObject({ max: 2, used: 2, remaining: 0 });
    // The refused request was given back to the rate limit.
    expect(explained.limits[0]).toMatchObject({ scope: 'key_global', source: { resource: { kind: 'Key' } }, held: { count: 2, remaining: 98 } });
  });

  it('under the DRL reads this gateway\'s bucket and its share', async () => {
    const a = api('a', { api_limit: { rate: 3, per: 60 } });
    const { engine, outcomes } = setup(config({ apis: [a] }));
    await outcomes(request(a, null), 2);
    const [reading] = (await engine.explain(request(a, null))).limits;
    expect(reading).toMatchObject({ algorithm: 'drl', drl: { gateways: 1, share: 3 }, held: { limit: 3, remaining: 1, count: 2 } });
  });

  it('under the DRL on a gateway that proxies nothing, says the count is not held there', async () => {
    const a = api('a', { api_limit: { rate: 3, per: 60 } });
    const engine = createLimitEngine({
      config: config({ apis: [a] }),
      backends: createLimitBackends({ instanceId: 'admin-only', logger: silentLogger, drlPeer: false }),
      events: collectingSink(),
      logger: silentLogger,
    });
    engines.push(engine);
    const explained = await engine.explain(request(a, null));
    expect(explained.limits).toMatchObject([{ scope: 'api', algorithm: 'drl', drl: null, held: null }]);
    expect([explained.outcome, explained.refusedBy]).toEqual(['allowed', null]);
  });
});
