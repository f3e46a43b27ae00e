import { describe, expect, it } from 'vitest';
import type { CompiledKeyLimit, CompiledPolicy } from '../../crds/compiled.ts';
import { effectiveLimits } from './effective-session.ts';
import { policy, session } from '../../test/support/compiled-fixtures.ts';

const perApiLimit = (rate: number, per: number, extra: Partial<CompiledKeyLimit> = {}): CompiledKeyLimit => ({
  rate: { rate, per },
  quota_max: -1,
  quota_renewal_rate: 0,
  throttle_interval: 0,
  throttle_retry_limit: 0,
  smoothing: null,
  ...extra,
});

const right = (apiId: string, limit: CompiledKeyLimit | null = null) => ({
  api_id: apiId,
  api_name: apiId,
  limit,
  endpoints: [],
});

const table = (policies: CompiledPolicy[]) => Object.fromEntries(policies.map((p) => [p.id, p]));

describe('effectiveLimits: policy combination', () => {
  const slowLong = policy('slow-long', { rate: { rate: 100, per: 60 } }); // 1.67/s
  const fastShort = policy('fast-short', { rate: { rate: 10, per: 1 } }); // 10/s
  const bigWindow = policy('big-window', { rate: { rate: 1000, per: 3600 } }); // 0.28/s

  it.each([
    [['slow-long'], { rate: 100, per: 60 }, 'default/slow-long'],
    [['slow-long', 'fast-short'], { rate: 10, per: 1 }, 'default/fast-short'],
    [['fast-short', 'slow-long', 'big-window'], { rate: 10, per: 1 }, 'default/fast-short'],
    // Not the pre-5.4.0 mix of the highest rate (1000) with the highest per (3600).
    [['big-window', 'slow-long'], { rate: 100, per: 60 }, 'default/slow-long'],
  ])('%j -> %j from %s', (names, rate, scopeId) => {
    const limits = effectiveLimits(session({ apply_policies: names }), 'a', table([slowLong, fastShort, bigWindow]));
    expect(limits.rate?.rate).toEqual(rate);
    expect(limits.rate?.scopeId).toBe(scopeId);
  });

  it('ties keep the first policy', () => {
    const one = policy('one', { rate: { rate: 10, per: 1 } });
    const two = policy('two', { rate: { rate: 20, per: 2 } });
    expect(effectiveLimits(session({ apply_policies: ['two', 'one'] }), 'a', table([one, two])).rate?.scopeId).toBe('default/two');
  });

  it('resolves names in the key namespace only', () => {
    const other = policy('p', { rate: { rate: 5, per: 1 } }, 'other');
    expect(effectiveLimits(session({ apply_policies: ['p'], namespace: 'default' }), 'a', table([other])).rate).toBeNull();
    expect(effectiveLimits(session({ apply_policies: ['p'], namespace: 'other' }), 'a', table([other])).rate?.rate.rate).toBe(5);
  });
});

describe('effectiveLimits: scopes', () => {
  it('a policy global allowance is shared by every API it grants', () => {
    const p = policy('g', { rate: { rate: 10, per: 1 }, access_rights: { a: right('a'), b: right('b') } });
    const onA = effectiveLimits(session({ apply_policies: ['g'] }), 'a', table([p]));
    const onB = effectiveLimits(session({ apply_policies: ['g'] }), 'b', table([p]));
    expect(onA.rate?.scopeId).toBe('default/g');
    expect(onB.rate?.scopeId).toBe('default/g');
    expect(onA.rate?.coverApis).toEqual(['a', 'b']);
  });

  it('a per-API limit is its own scope for that API only', () => {
    const p = policy('g', {
      rate: { rate: 10, per: 1 },
      access_rights: { a: right('a', perApiLimit(3, 1)), b: right('b') },
    });
    const onA = effectiveLimits(session({ apply_policies: ['g'] }), 'a', table([p]));
    const onB = effectiveLimits(session({ apply_policies: ['g'] }), 'b', table([p]));
    expect(onA.rate).toMatchObject({ rate: { rate: 3, per: 1 }, scopeId: 'default/g#a', coverApis: ['a'] });
    expect(onB.rate).toMatchObject({ rate: { rate: 10, per: 1 }, scopeId: 'default/g' });
  });

  it('a policy that does not grant the API gives no limit there', () => {
    const p = policy('g', { rate: { rate: 10, per: 1 }, access_rights: { b: right('b') } });
    expect(effectiveLimits(session({ apply_policies: ['g'] }), 'a', table([p])).rate).toBeNull();
  });

  it('an API only the key\'s own access_rights grant keeps the key\'s own limits, quota and pattern beside its policies', () => {
    const p = policy('g', { rate: { rate: 100, per: 1 }, quota_max: 1000, quota_renewal_rate: 60, rate_limit_pattern: '$gw_meta.org', access_rights: { b: right('b') } });
    const fields = { alias: 'k1', rate: 2, per: 60, quota_max: 5, quota_renewal_rate: 3600, apply_policies: ['g'], meta_data: { rate_limit_pattern: '$gw_meta.team' } };
    const own = effectiveLimits(session({ ...fields, access_rights: { a: { api_id: 'a' } } }), 'a', table([p]));
    // Under the key's own pattern, its counters are its namespace's, and its rate's (docs/behaviour.md#custom-rate-limit-keys).
    expect(own.rate).toMatchObject({ rate: { rate: 2, per: 60 }, scopeId: 'default/session@2/60', scope: 'key_global' });
    expect(own.quota).toMatchObject({ max: 5, renewalSeconds: 3600, scopeId: 'default/session', own: true });
    expect(own.pattern).toBe('$gw_meta.team');
    const perApi = effectiveLimits(session({ ...fields, access_rights: { a: { api_id: 'a', limit: { rate: 3, per: 1 } } } }), 'a', table([p]));
    expect(perApi.rate).toMatchObject({ rate: { rate: 3, per: 1 }, scopeId: 'default/session#a@3/1', scope: 'key_per_api' });
    // On the API the policy grants, the policy's limits apply, not the key's own.
    const granted = effectiveLimits(session({ ...fields, access_rights: { a: { api_id: 'a' } } }), 'b', table([p]));
    expect(granted.rate).toMatchObject({ rate: { rate: 100, per: 1 }, scopeId: 'default/g' });
    expect(granted.quota).toMatchObject({ max: 1000, scopeId: 'default/g', own: false });
    expect(granted.pattern).toBe('$gw_meta.org');
  });

  it('key-level per-endpoint limits come from the policies granting the API', () => {
    const p = policy('g', {
      rate: { rate: 10, per: 1 },
      access_rights: {
        a: { ...right('a'), endpoints: [{ path: '/x', pattern: '^/x$', method: 'GET', rate: 2, per: 1 }] },
      },
    });
    const groups = effectiveLimits(session({ apply_policies: ['g'] }), 'a', table([p])).endpointGroups;
    expect(groups).toHaveLength(1);
    expect(groups[0]![0]!.value).toMatchObject({ rate: { rate: 2, per: 1 }, scopeId: 'default/g#a#GET /x' });
  });
});

describe('effectiveLimits: a key without policies', () => {
  it.each([
    [{ rate: 5, per: 2 }, { rate: 5, per: 2 }, 'session'],
    [{ allowance: 7, per: 1 }, { rate: 7, per: 1 }, 'session'],
    [{ rate: 0, per: 0 }, null, undefined],
    [
      { rate: 50, per: 1, access_rights: { a: { api_id: 'a', limit: { rate: 4, per: 1 } } } },
      { rate: 4, per: 1 },
      'session#a',
    ],
  ])('%j -> %j', (fields, rate, scopeId) => {
    const limits = effectiveLimits(session(fields), 'a', {});
    expect(limits.rate?.rate ?? null).toEqual(rate);
    expect(limits.rate?.scopeId).toBe(scopeId);
  });

  it('takes quota, throttle and smoothing from the key itself', () => {
    const smoothing = { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 1 };
    const limits = effectiveLimits(
      session({ rate: 5, per: 1, quota_max: 9, quota_renewal_rate: 60, throttle_interval: 1, throttle_retry_limit: 3, smoothing, alias: 'k1' }),
      'a',
      {},
    );
    expect(limits.quota).toEqual({ max: 9, renewalSeconds: 60, scopeId: 'session', own: true, source: { kind: 'Key', namespace: 'default', name: 'k1' } });
    expect(limits.rate?.throttle).toEqual({ intervalMs: 1000, retries: 3 });
    expect(limits.rate?.smoothing).toEqual({ settings: smoothing, source: { kind: 'Key', namespace: 'default', name: 'k1' } });
  });

  it('names the Key resource (key_id) as the smoothing source when the session has one', () => {
    const smoothing = { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 1 };
    const limits = effectiveLimits(session({ rate: 5, per: 1, smoothing, alias: 'k1', key_id: 'team-key', namespace: 'ns' }), 'a', {});
    expect(limits.rate?.smoothing?.source).toEqual({ kind: 'Key', namespace: 'ns', name: 'team-key' });
    const adopted = effectiveLimits(session({ rate: 5, per: 1, smoothing, key_id: 'team-key', namespace: 'ns', key_uid: 'u-1' }), 'a', {});
    expect(adopted.rate?.smoothing?.source).toEqual({ kind: 'Key', namespace: 'ns', name: 'team-key', uid: 'u-1' });
  });
});

describe('effectiveLimits: quota, throttle, pattern and smoothing from policies', () => {
  it.each([
    [[10, 20], 20],
    [[20, 10], 20],
    [[10, -1], null],
    [[-1], null],
    [[0, 5], null],
  ])('quotas %j -> %j', (quotas, expected) => {
    const policies = quotas.map((q, i) => policy(`q${i}`, { quota_max: q, quota_renewal_rate: 60 }));
    const limits = effectiveLimits(session({ apply_policies: policies.map((p) => p.source.name) }), 'a', table(policies));
    expect(limits.quota?.max ?? null).toBe(expected);
  });

  it('throttle and smoothing follow the winning rate', () => {
    const smoothing = { enabled: true, threshold: 1, step: 1, trigger: 0.5, delay: 0 };
    const slow = policy('slow', { rate: { rate: 1, per: 1 }, throttle_interval: 5, throttle_retry_limit: 5 });
    const fast = policy('fast', { rate: { rate: 9, per: 1 }, throttle_interval: 1, throttle_retry_limit: 2, smoothing });
    const limits = effectiveLimits(session({ apply_policies: ['slow', 'fast'] }), 'a', table([slow, fast]));
    expect(limits.rate?.throttle).toEqual({ intervalMs: 1000, retries: 2 });
    expect(limits.rate?.smoothing?.source).toEqual(fast.source);
  });

  it("a per-endpoint limit brings its Policy's throttle, or its per-API limit's on that API", () => {
    const endpoints = [{ path: '/x', pattern: '^/x$', method: 'GET', rate: 1, per: 2 }];
    const endpointOnly = policy('ep', { throttle_interval: 1, throttle_retry_limit: 3, access_rights: { a: { ...right('a'), endpoints } } });
    const perApi = policy('pa', {
      throttle_interval: 1,
      throttle_retry_limit: 3,
      access_rights: { a: { ...right('a', perApiLimit(5, 1, { throttle_interval: 2, throttle_retry_limit: 1 })), endpoints } },
    });
    const [group] = effectiveLimits(session({ apply_policies: ['ep'] }), 'a', table([endpointOnly])).endpointGroups;
    expect(group?.[0]?.value.throttle).toEqual({ intervalMs: 1000, retries: 3 });
    const [replaced] = effectiveLimits(session({ apply_policies: ['pa'] }), 'a', table([perApi])).endpointGroups;
    expect(replaced?.[0]?.value.throttle).toEqual({ intervalMs: 2000, retries: 1 });
  });

  it('disabled smoothing is no smoothing', () => {
    const p = policy('p', { rate: { rate: 9, per: 1 }, smoothing: { enabled: false, threshold: 1, step: 1, trigger: 1, delay: 0 } });
    expect(effectiveLimits(session({ apply_policies: ['p'] }), 'a', table([p])).rate?.smoothing).toBeNull();
  });

  it.each([
    [['plain', 'patterned'], {}, '$gw_meta.org'],
    [['plain'], { rate_limit_pattern: '$gw_meta.ip' }, '$gw_meta.ip'],
    [['patterned'], { rate_limit_pattern: '$gw_meta.ip' }, '$gw_meta.org'],
    [['plain'], {}, null],
  ])('pattern with %j and session meta %j -> %s', (names, meta, expected) => {
    const plain = policy('plain', { rate: { rate: 1, per: 1 } });
    const patterned = policy('patterned', { rate: { rate: 1, per: 1 }, rate_limit_pattern: '$gw_meta.org' });
    const limits = effectiveLimits(session({ apply_policies: names, meta_data: meta }), 'a', table([plain, patterned]));
    expect(limits.pattern).toBe(expected);
  });
});
