import { afterEach, describe, expect, it } from 'vitest';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { testEnv } from '../../harness/index.ts';
import { sleep, startGateway, stopAllGateways, uniqueId, watchCommands } from './helpers.ts';

afterEach(stopAllGateways);

/**
 * docs/architecture.md#performance: at most one Redis round trip per request for all the limits it meets,
 * measured from Redis itself (MONITOR), on a Redis no other test writes to during the
 * measurement (integration files run one after another).
 */
describe('one round trip per decision', () => {
  const decisions = 50;

  it.each([
    ['sliding log', { enable_redis_rolling_limiter: true }],
    ['fixed window', { enable_fixed_window_rate_limiter: true }],
    ['sentinel', { enable_sentinel_rate_limiter: true }],
  ])('%s: one EVALSHA for an API-level limit, a key-level limit and a quota', async (name, settings) => {
    const a = api(uniqueId('rtt'), { api_limit: { rate: 10_000, per: 60 } });
    const p = policy('rtt', { rate: { rate: 10_000, per: 60 }, quota_max: 100_000, quota_renewal_rate: 3600 });
    const gateway = startGateway(config({ settings, apis: [a], policies: [p] }), testEnv().redisUrl);
    const req = request(a, { session: session({ apply_policies: ['rtt'] }), raw: uniqueId('key') });
    // The first call may pay EVAL once (NOSCRIPT); measure the steady state.
    await gateway.engine.decide(req);
    const observer = await watchCommands(testEnv().redisUrl);
    try {
      await sleep(50);
      for (let i = 0; i < decisions; i++) expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
      await sleep(100);
      if (name === 'sentinel') {
        // The sentinel's log trimming is its background write (docs/behaviour.md#algorithms), off the request
        // path and batched: each MULTI trims both limiters' logs for many decisions.
        const { evalsha, multi, exec, zremrangebyscore, ...rest } = observer.counts();
        expect({ evalsha, rest }).toEqual({ evalsha: decisions, rest: {} });
        expect(multi).toBe(exec);
        expect(multi).toBeGreaterThanOrEqual(1);
        expect(multi).toBeLessThan(decisions / 2);
        expect(zremrangebyscore).toBe(2 * multi!);
      } else {
        expect(observer.counts()).toEqual({ evalsha: decisions });
      }
    } finally {
      observer.stop();
    }
  });

  it('reloads the script after SCRIPT FLUSH (NOSCRIPT) and keeps counting', async () => {
    const a = api(uniqueId('noscript'), { api_limit: { rate: 3, per: 60 } });
    const gateway = startGateway(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }), testEnv().redisUrl);
    expect((await gateway.engine.decide(request(a, null))).outcome).toBe('allowed');
    await gateway.redis.script('FLUSH');
    const outcomes = [];
    for (let i = 0; i < 3; i++) outcomes.push((await gateway.engine.decide(request(a, null))).outcome);
    expect(outcomes).toEqual(['allowed', 'allowed', 'api_rate_limited']);
  });

  it('the DRL makes no Redis call per request (heartbeats only)', async () => {
    const a = api(uniqueId('drl'), { api_limit: { rate: 10_000, per: 60 } });
    const p = policy('rtt', { rate: { rate: 10_000, per: 60 } });
    const gateway = startGateway(config({ apis: [a], policies: [p] }), testEnv().redisUrl, { heartbeatIntervalMs: 60_000 });
    const req = request(a, { session: session({ apply_policies: ['rtt'] }), raw: uniqueId('key') });
    // Let the first heartbeat finish: MONITOR starts on a quiet Redis.
    await sleep(200);
    const observer = await watchCommands(testEnv().redisUrl);
    try {
      await sleep(50);
      for (let i = 0; i < decisions; i++) expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
      await sleep(100);
      expect(observer.counts()).toEqual({});
    } finally {
      observer.stop();
    }
  });
});
