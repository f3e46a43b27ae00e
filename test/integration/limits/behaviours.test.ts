import { afterEach, describe, expect, it } from 'vitest';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import type { LimitRequest } from '../../../sidecar/limits/types.ts';
import { sessionFromKey } from '../../../common/session-from-key.ts';
import { testEnv } from '../../harness/index.ts';
import { alignTo, metricValues, sleep, startGateway, stopAllGateways, uniqueId, type Gateway } from './helpers.ts';

afterEach(stopAllGateways);

async function outcomes(gateway: Gateway, req: LimitRequest, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push((await gateway.engine.decide(req)).outcome);
  return out;
}

const rolling = { enable_redis_rolling_limiter: true };

describe('sliding log on Redis', () => {
  it('spike arrest: knocking keeps the limit closed; a quiet window reopens it', async () => {
    // Knocks every 300 ms for 3 s on a 2 s window: once the five admitted requests have left
    // it, only the knocks, each logged, keep it at the rate. Three knocks (six entries) within
    // 2 s are enough, so a test process that wakes up to 350 ms late still sees it closed.
    const a = api(uniqueId('spike'), { api_limit: { rate: 5, per: 2 } });
    const gateway = startGateway(config({ settings: rolling, apis: [a] }), testEnv().redisUrl);
    const req = request(a, null);
    expect(await outcomes(gateway, req, 6)).toEqual([...Array(5).fill('allowed'), 'api_rate_limited']);
    for (let i = 0; i < 10; i++) {
      await sleep(300);
      expect(await outcomes(gateway, req, 2)).toEqual(['api_rate_limited', 'api_rate_limited']);
    }
    await sleep(2050);
    expect(await outcomes(gateway, req, 6)).toEqual([...Array(5).fill('allowed'), 'api_rate_limited']);
  });
});

describe('sentinel on Redis', () => {
  it('blocks for per once the limit is reached; knocking keeps it closed, a quiet window reopens it', async () => {
    // As in the sliding log, refusals are logged: two knocks every 300 ms keep more than the
    // rate in any 1 s window, so each flag that ends finds the window full and is set again.
    const a = api(uniqueId('sentinel'), { api_limit: { rate: 3, per: 1 } });
    const cfg = config({ settings: { enable_sentinel_rate_limiter: true }, apis: [a] });
    const gateway = startGateway(cfg, testEnv().redisUrl);
    const req = request(a, null);
    const reachedAt = Date.now();
    expect(await outcomes(gateway, req, 4)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
    const blocked = await gateway.engine.decide(req);
    expect(blocked.outcome).toBe('api_rate_limited');
    expect(blocked.rate?.reset).toBeGreaterThanOrEqual(Math.floor(reachedAt / 1000));
    for (let i = 0; i < 8; i++) {
      await sleep(300);
      expect(await outcomes(gateway, req, 2)).toEqual(['api_rate_limited', 'api_rate_limited']);
    }
    await sleep(1050);
    expect(await outcomes(gateway, req, 4)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
  });

  it.each([false, true])('trims its log in the background (non-transactional: %s)', async (nonTransactional) => {
    const a = api(uniqueId('sentinel'), { api_limit: { rate: 100, per: 1 } });
    const settings = { enable_sentinel_rate_limiter: true, enable_non_transactional_rate_limiter: nonTransactional };
    const gateway = startGateway(config({ settings, apis: [a] }), testEnv().redisUrl);
    await outcomes(gateway, request(a, null), 3);
    await sleep(1100);
    await outcomes(gateway, request(a, null), 1);
    await sleep(100);
    const log = `gw:rl:{a:${a.api_id}}:log`;
    expect(await gateway.redis.zcard(log)).toBe(1);
    expect(await gateway.redis.pttl(log)).toBeGreaterThan(0);
  });
});

describe('fixed window on Redis', () => {
  it('resets at the window boundary, aligned to per', async () => {
    const a = api(uniqueId('fixed'), { api_limit: { rate: 3, per: 1 } });
    const gateway = startGateway(config({ settings: { enable_fixed_window_rate_limiter: true }, apis: [a] }), testEnv().redisUrl);
    const req = request(a, null);
    await alignTo(1000);
    const first = await gateway.engine.decide(req);
    expect(first.rate).toEqual({ limit: 3, remaining: 2, reset: Math.ceil(Date.now() / 1000) });
    expect(await outcomes(gateway, req, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    await alignTo(1000);
    expect(await outcomes(gateway, req, 4)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
  });
});

describe('smoothing on Redis', () => {
  it('one allowance shared by all gateways; each change emitted once, by the gateway that made it', async () => {
    const smoothing = { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 1 };
    const a = api(uniqueId('smooth'), { api_limit: { rate: 6, per: 2 }, smoothing });
    const cfg = config({ settings: rolling, apis: [a] });
    const one = startGateway(cfg, testEnv().redisUrl);
    const two = startGateway(cfg, testEnv().redisUrl);
    const req = request(a, null);
    // 2 in the window on `two`'s third request (> 2 − 1): up to 4.
    expect(await outcomes(one, req, 2)).toEqual(['allowed', 'allowed']);
    expect(await outcomes(two, req, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    expect(one.events).toEqual([]);
    expect(two.events.map((e) => [e.reason, e.oldAllowance, e.newAllowance])).toEqual([['RateLimitSmoothingUp', 2, 4]]);
    expect(two.events[0]).toMatchObject({ source: a.source, limiterKey: `a:${a.api_id}` });
    // Hold-off, then up to the rate: the other gateway sees and makes the next change.
    await sleep(1000);
    await outcomes(one, req, 1);
    expect(one.events.map((e) => [e.reason, e.oldAllowance, e.newAllowance])).toEqual([['RateLimitSmoothingUp', 4, 6]]);
    // Quiet windows: down by step, to threshold, each change once.
    await sleep(2050);
    await outcomes(two, req, 1);
    await sleep(2050);
    await outcomes(one, req, 1);
    const all = [...one.events, ...two.events].sort((x, y) => x.time.getTime() - y.time.getTime());
    expect(all.map((e) => [e.reason, e.newAllowance])).toEqual([
      ['RateLimitSmoothingUp', 4],
      ['RateLimitSmoothingUp', 6],
      ['RateLimitSmoothingDown', 4],
      ['RateLimitSmoothingDown', 2],
    ]);
    const state = await one.redis.hget(`gw:rl:{a:${a.api_id}}:smooth`, 'a');
    expect(state).toBe('2');
    // Each gateway's gauge holds the allowance it moved to last, labelled by the smoothing's resource.
    const label = `${a.source.kind}/${a.source.namespace}/${a.source.name}`;
    expect(await metricValues(one.registry, 'gw_smoothing_allowance')).toEqual({ [label]: 2 });
    expect(await metricValues(two.registry, 'gw_smoothing_allowance')).toEqual({ [label]: 4 });
    // One store call in 8 is timed on average, from 4 to 12 calls apart (common/sampler.ts):
    // eight more decisions make this gateway's twelfth call.
    await outcomes(one, req, 8);
    const timed = Number(/^gw_limit_store_duration_seconds_count (\d+)$/m.exec(await one.registry.metrics())?.[1]);
    expect(timed).toBeGreaterThanOrEqual(1);
    expect(timed).toBeLessThanOrEqual(3);
  });
});

describe('throttling on Redis', () => {
  it.each([
    ['the sliding log', rolling],
    ['the sentinel', { enable_sentinel_rate_limiter: true }],
  ])("admits a throttled burst under %s once the window has room: the gateway's own retries are not logged", async (_name, settings) => {
    const a = api(uniqueId('throttle'));
    const gateway = startGateway(config({ settings: { ...settings, throttle_max_wait_ms: 10_000 }, apis: [a] }), testEnv().redisUrl);
    const caller = { session: session({ rate: 2, per: 2, throttle_interval: 1, throttle_retry_limit: 3 }), raw: uniqueId('key') };
    const started = Date.now();
    const burst = await Promise.all([0, 1, 2, 3].map(async () => ({ outcome: (await gateway.engine.decide(request(a, caller))).outcome, after: Date.now() - started })));
    expect(burst.map((b) => b.outcome)).toEqual(['allowed', 'allowed', 'allowed', 'allowed']);
    // Two at once; the other two once the first two left the 2 s window, not before.
    expect(burst.filter((b) => b.after < 500)).toHaveLength(2);
    expect(burst.filter((b) => b.after >= 1_900 && b.after < 3_500)).toHaveLength(2);
  });

  it("throttles a request refused by a Policy's per-endpoint limit when the Policy has no other rate", async () => {
    const a = api(uniqueId('throttle'));
    const endpoints = [{ path: '/x', pattern: '^/x$', method: 'GET', rate: 1, per: 2 }];
    const p = policy('ep-pol', { throttle_interval: 1, throttle_retry_limit: 3, access_rights: { [a.api_id]: { api_id: a.api_id, api_name: a.api_id, limit: null, endpoints } } });
    const gateway = startGateway(config({ settings: { ...rolling, throttle_max_wait_ms: 10_000 }, apis: [a], policies: [p] }), testEnv().redisUrl);
    const caller = { session: session({ apply_policies: ['ep-pol'] }), raw: uniqueId('key') };
    const req = request(a, caller, 'GET', '/x');
    expect((await gateway.engine.explain(req)).throttle).toMatchObject({ intervalMs: 1000, retries: 3 });
    expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
    const started = Date.now();
    expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
    // It waited, in 1 s steps, until the 2 s window had room.
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
  });
});

describe('quotas on Redis', () => {
  it.each([
    ['renews after quota_renewal_rate', 1, 'allowed'],
    ['never renews with quota_renewal_rate 0', 0, 'quota_exceeded'],
  ])('%s', async (_name, renewal, after) => {
    const a = api(uniqueId('quota'));
    const gateway = startGateway(config({ settings: rolling, apis: [a] }), testEnv().redisUrl);
    const caller = { session: session({ quota_max: 2, quota_renewal_rate: renewal }), raw: uniqueId('key') };
    const first = await gateway.engine.decide(request(a, caller));
    expect(first.quota).toMatchObject({ limit: 2, remaining: 1 });
    expect(await outcomes(gateway, request(a, caller), 2)).toEqual(['allowed', 'quota_exceeded']);
    await sleep(1100);
    expect(await outcomes(gateway, request(a, caller), 1)).toEqual([after]);
  });

  it("a new Key's quota_remaining is what its first period has left", async () => {
    // The session as the operator, the folder and create-key derive it from a Key.
    const derived = sessionFromKey({ rate: 100, per: 1, quota_max: 10, quota_remaining: 2, quota_renewal_rate: 3600 }, { name: 'k', namespace: 'default' }, null, new Date());
    if (!derived.ok) throw new Error(derived.message);
    const a = api(uniqueId('quota'));
    const gateway = startGateway(config({ settings: rolling, apis: [a] }), testEnv().redisUrl);
    const caller = { session: derived.session, raw: uniqueId('key') };
    const first = await gateway.engine.decide(request(a, caller));
    expect(first.quota).toMatchObject({ limit: 10, remaining: 1 });
    expect(await outcomes(gateway, request(a, caller), 2)).toEqual(['allowed', 'quota_exceeded']);
  });

  it("a new Key given quota_remaining 0 has nothing left in its first period", async () => {
    const derived = sessionFromKey({ rate: 100, per: 1, quota_max: 3, quota_remaining: 0, quota_renewal_rate: 3600 }, { name: 'k', namespace: 'default' }, null, new Date());
    if (!derived.ok) throw new Error(derived.message);
    const a = api(uniqueId('quota'));
    const gateway = startGateway(config({ settings: rolling, apis: [a] }), testEnv().redisUrl);
    const caller = { session: derived.session, raw: uniqueId('key') };
    expect(await outcomes(gateway, request(a, caller), 2)).toEqual(['quota_exceeded', 'quota_exceeded']);
    expect((await gateway.engine.decide(request(a, caller))).quota).toMatchObject({ limit: 3, remaining: 0, reset: derived.session.quota_renews });
  });

  it("a Policy's quota on a new Key runs its first period from the Key's session, as the Key's own does", async () => {
    const made = new Date(Date.now() - 20_000);
    const p = policy(uniqueId('quota-policy'), { quota_max: 3, quota_renewal_rate: 60 });
    const derived = sessionFromKey({ apply_policies: [p.source.name] }, { name: 'k', namespace: 'default' }, null, made);
    if (!derived.ok) throw new Error(derived.message);
    const a = api(uniqueId('quota'));
    const gateway = startGateway(config({ settings: rolling, apis: [a], policies: [p] }), testEnv().redisUrl);
    const first = await gateway.engine.decide(request(a, { session: derived.session, raw: uniqueId('key') }));
    expect(first.quota).toEqual({ limit: 3, remaining: 2, reset: Math.floor(made.getTime() / 1000) + 60 });
  });

  it("holds a key to its own rate and quota on an API its own access_rights grant, where its Policies grant others", async () => {
    const mine = api(uniqueId('own-grant'));
    const theirs = api(uniqueId('policy-grant'));
    const p = policy(uniqueId('other-apis'), { rate: { rate: 100, per: 60 }, access_rights: { [theirs.api_id]: { api_id: theirs.api_id, api_name: theirs.name, limit: null, endpoints: [] } } });
    const gateway = startGateway(config({ settings: rolling, apis: [mine, theirs], policies: [p] }), testEnv().redisUrl);
    const own = { session: session({ rate: 2, per: 60, apply_policies: [p.source.name], access_rights: { [mine.api_id]: { api_id: mine.api_id } } }), raw: uniqueId('key') };
    expect(await outcomes(gateway, request(mine, own), 3)).toEqual(['allowed', 'allowed', 'key_rate_limited']);
    expect(await outcomes(gateway, request(theirs, own), 3)).toEqual(['allowed', 'allowed', 'allowed']);
    const quota = { session: session({ quota_max: 1, quota_renewal_rate: 3600, apply_policies: [p.source.name], access_rights: { [mine.api_id]: { api_id: mine.api_id } } }), raw: uniqueId('key') };
    expect(await outcomes(gateway, request(mine, quota), 2)).toEqual(['allowed', 'quota_exceeded']);
  });

  it('is shared by gateways and not consumed by rate-limited requests', async () => {
    const a = api(uniqueId('quota'));
    const cfg = config({ settings: rolling, apis: [a] });
    const one = startGateway(cfg, testEnv().redisUrl);
    const two = startGateway(cfg, testEnv().redisUrl);
    const caller = { session: session({ rate: 1, per: 1, quota_max: 2, quota_renewal_rate: 3600 }), raw: uniqueId('key') };
    expect(await outcomes(one, request(a, caller), 3)).toEqual(['allowed', 'key_rate_limited', 'key_rate_limited']);
    await sleep(1050);
    expect(await outcomes(two, request(a, caller), 2)).toEqual(['allowed', 'key_rate_limited']);
    await sleep(1050);
    expect(await outcomes(one, request(a, caller), 1)).toEqual(['quota_exceeded']);
  });
});

describe('custom rate-limit keys on Redis', () => {
  it('keys with the same pattern value share one allowance across gateways; Redis sees only hashes', async () => {
    const a = api(uniqueId('pattern'));
    const p = policy('org-limit', { rate: { rate: 3, per: 10 }, rate_limit_pattern: '$gw_meta.org' });
    const team = policy('team-limit', { rate: { rate: 3, per: 10 }, rate_limit_pattern: '$gw_meta.org|$gw_meta.team' });
    const cfg = config({ settings: rolling, apis: [a], policies: [p, team] });
    const one = startGateway(cfg, testEnv().redisUrl);
    const two = startGateway(cfg, testEnv().redisUrl);
    const org = uniqueId('org');
    const alice = { session: session({ apply_policies: ['org-limit'], meta_data: { org } }), raw: uniqueId('alice') };
    const bob = { session: session({ apply_policies: ['org-limit'], meta_data: { org } }), raw: uniqueId('bob') };
    const carol = { session: session({ apply_policies: ['org-limit'], meta_data: {} }), raw: uniqueId('carol') };
    expect(await outcomes(one, request(a, alice), 2)).toEqual(['allowed', 'allowed']);
    expect(await outcomes(two, request(a, bob), 2)).toEqual(['allowed', 'key_rate_limited']);
    expect(await outcomes(two, request(a, carol), 3)).toEqual(['allowed', 'allowed', 'allowed']);
    // A blank field is no field: each such key counts on its own, not in one allowance (`|`) for all of them.
    const dave = { session: session({ apply_policies: ['team-limit'], meta_data: { org: '', team: '' } }), raw: uniqueId('dave') };
    const erin = { session: session({ apply_policies: ['team-limit'], meta_data: { org: '', team: '' } }), raw: uniqueId('erin') };
    expect(await outcomes(one, request(a, dave), 3)).toEqual(['allowed', 'allowed', 'allowed']);
    expect(await outcomes(two, request(a, erin), 4)).toEqual(['allowed', 'allowed', 'allowed', 'key_rate_limited']);
    // Values that differ only in where a `|` falls (`x|y` then `z`, and `x` then `y|z`) are two tenants, not one.
    const tenant = uniqueId('tenant');
    const frank = { session: session({ apply_policies: ['team-limit'], meta_data: { org: `${tenant}|y`, team: 'z' } }), raw: uniqueId('frank') };
    const grace = { session: session({ apply_policies: ['team-limit'], meta_data: { org: tenant, team: 'y|z' } }), raw: uniqueId('grace') };
    expect(await outcomes(one, request(a, frank), 4)).toEqual(['allowed', 'allowed', 'allowed', 'key_rate_limited']);
    expect(await outcomes(two, request(a, grace), 4)).toEqual(['allowed', 'allowed', 'allowed', 'key_rate_limited']);
    const keys = await one.redis.keys('gw:rl:*');
    for (const secret of [org, tenant, alice.raw, bob.raw, carol.raw, frank.raw, grace.raw]) expect(keys.join('\n')).not.toContain(secret);
  });
});

describe("a Key's own rate_limit_pattern on Redis", () => {
  it('shares counters within the Key\'s namespace only, and each Key meets its own rate', async () => {
    const a = api(uniqueId('own-pattern'));
    const gateway = startGateway(config({ settings: rolling, apis: [a] }), testEnv().redisUrl);
    const [x, y] = [uniqueId('tenant-x'), uniqueId('tenant-y')];
    const meta_data = { rate_limit_pattern: '$gw_meta.org', org: uniqueId('acme') };
    const rights = { access_rights: { [a.api_id]: { api_id: a.api_id } } };
    const key = (namespace: string, fields: Record<string, unknown>) => ({ session: session({ namespace, meta_data, ...rights, ...fields }), raw: uniqueId('key') });
    const fast = key(x, { rate: 100, per: 30 });
    const slow = key(y, { rate: 3, per: 30 });
    const slowNeighbour = key(y, { rate: 3, per: 30 });
    const slowOfX = key(x, { rate: 3, per: 30 });
    expect(await outcomes(gateway, request(a, fast), 3)).toEqual(['allowed', 'allowed', 'allowed']);
    // Another namespace's requests with the same metadata are another tenant's.
    expect(await outcomes(gateway, request(a, slow), 4)).toEqual(['allowed', 'allowed', 'allowed', 'key_rate_limited']);
    // Within the namespace, keys of the same limit share it ...
    expect(await outcomes(gateway, request(a, slowNeighbour), 1)).toEqual(['key_rate_limited']);
    // ... and a key of another limit keeps its own rate, neither spent by nor spending the other's.
    expect(await outcomes(gateway, request(a, slowOfX), 4)).toEqual(['allowed', 'allowed', 'allowed', 'key_rate_limited']);
    expect(await outcomes(gateway, request(a, fast), 1)).toEqual(['allowed']);
    // The quota is the namespace's too.
    const quota = { quota_max: 1, quota_renewal_rate: 3600 };
    expect(await outcomes(gateway, request(a, key(x, quota)), 2)).toEqual(['allowed', 'quota_exceeded']);
    expect(await outcomes(gateway, request(a, key(y, quota)), 1)).toEqual(['allowed']);
  });
});
