import { afterEach, describe, expect, it } from 'vitest';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { Redis, type Cluster } from 'ioredis';
import { limiterKey } from '../../../common/redis-keys.ts';
import { limitsFunction } from '../../../sidecar/limits/stores/limits-script.ts';
import { READ_AGAIN_MS } from '../../../sidecar/limits/heartbeat.ts';
import { startRedis, testEnv } from '../../harness/index.ts';
import { metricValues, sleep, startGateway, stopAllGateways, uniqueId, watchCommands } from './helpers.ts';

afterEach(stopAllGateways);

/** The names of the function libraries loaded on the server behind `redis`. */
async function loadedLibraries(redis: Redis | Cluster): Promise<string[]> {
  const libraries = (await redis.call('FUNCTION', 'LIST')) as unknown[][];
  return libraries.map((library) => String(library[1]));
}

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
  ])('%s: one FCALL for an API-level limit, a key-level limit and a quota', async (name, settings) => {
    const a = api(uniqueId('rtt'), { api_limit: { rate: 10_000, per: 60 } });
    const p = policy('rtt', { rate: { rate: 10_000, per: 60 }, quota_max: 100_000, quota_renewal_rate: 3600 });
    const gateway = startGateway(config({ settings, apis: [a], policies: [p] }), testEnv().redisUrl);
    const req = request(a, { session: session({ apply_policies: ['rtt'] }), raw: uniqueId('key') });
    // The first call may load the limit function; measure the steady state.
    await gateway.engine.decide(req);
    const observer = await watchCommands(testEnv().redisUrl);
    try {
      await sleep(50);
      for (let i = 0; i < decisions; i++) expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
      await sleep(100);
      if (name === 'sentinel') {
        // The sentinel's log trimming is its background write (docs/behaviour.md#algorithms), off the request
        // path and batched: each MULTI trims both limiters' logs for many decisions.
        const { fcall, multi, exec, zremrangebyscore, ...rest } = observer.counts();
        expect({ fcall, rest }).toEqual({ fcall: decisions, rest: {} });
        expect(multi).toBe(exec);
        expect(multi).toBeGreaterThanOrEqual(1);
        expect(multi).toBeLessThan(decisions / 2);
        expect(zremrangebyscore).toBe(2 * multi!);
      } else {
        expect(observer.counts()).toEqual({ fcall: decisions });
      }
    } finally {
      observer.stop();
    }
  });

  it('loads the limit function on first use, again after FUNCTION FLUSH, and keeps counting', async () => {
    const a = api(uniqueId('flush'), { api_limit: { rate: 3, per: 60 } });
    const gateway = startGateway(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }), testEnv().redisUrl);
    // As a Redis that never ran gw: the first decision loads the function.
    await gateway.redis.call('FUNCTION', 'FLUSH');
    expect((await gateway.engine.decide(request(a, null))).outcome).toBe('allowed');
    expect(await loadedLibraries(gateway.redis)).toContain(limitsFunction);
    await gateway.redis.call('FUNCTION', 'FLUSH');
    expect(await loadedLibraries(gateway.redis)).not.toContain(limitsFunction);
    const observer = await watchCommands(testEnv().redisUrl);
    const outcomes = [];
    try {
      await sleep(50);
      for (let i = 0; i < 3; i++) outcomes.push((await gateway.engine.decide(request(a, null))).outcome);
      await sleep(100);
      // The first call found the function missing, loaded it once, and was sent again.
      expect(observer.counts()).toEqual({ fcall: 4, function: 1 });
    } finally {
      observer.stop();
    }
    expect(outcomes).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    expect(await loadedLibraries(gateway.redis)).toContain(limitsFunction);
    expect(gateway.logs.filter((line) => line.includes('limit function loaded'))).toHaveLength(2);
    expect(await metricValues(gateway.registry, 'gw_limit_script_function')).toEqual({ total: 1 });
  });

  it('a user without +fcall and +function goes by EVALSHA, says so once, and counts exactly', async () => {
    const admin = new Redis(testEnv().redisUrl);
    const user = uniqueId('no-functions');
    await admin.call('ACL', 'SETUSER', user, 'on', '>no-functions-pw', '~*', '&*', '+@all', '-fcall', '-function');
    try {
      const a = api(uniqueId('acl-fallback'), { api_limit: { rate: 3, per: 60 } });
      const url = new URL(testEnv().redisUrl);
      url.username = user;
      url.password = 'no-functions-pw';
      const gateway = startGateway(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }), url.toString());
      const outcomes = [];
      for (let i = 0; i < 4; i++) outcomes.push((await gateway.engine.decide(request(a, null))).outcome);
      expect(outcomes).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
      expect(await gateway.redis.zcard(limiterKey(`a:${a.api_id}`, 'log'))).toBe(4);
      const fallbacks = gateway.logs.filter((line) => line.includes('limits run by EVALSHA'));
      expect(fallbacks).toHaveLength(1);
      expect(JSON.parse(fallbacks[0]!)).toMatchObject({ level: 40, reason: expect.stringMatching(/^NOPERM .*'fcall'/) });
      expect(await metricValues(gateway.registry, 'gw_limit_script_function')).toEqual({ total: 0 });
    } finally {
      await admin.call('ACL', 'DELUSER', user);
      admin.disconnect();
    }
  });

  it.each([
    ['FUNCTION renamed away', ['--rename-command', 'FUNCTION', '']],
    ['FCALL and FUNCTION renamed away, as before Redis 7', ['--rename-command', 'FUNCTION', '', '--rename-command', 'FCALL', '']],
  ])('a Redis with %s: limits go by EVALSHA and count exactly', async (_name, settings) => {
    const redis = await startRedis(settings);
    try {
      const a = api(uniqueId('no-functions'), { api_limit: { rate: 3, per: 60 } });
      const gateway = startGateway(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }), redis.url);
      expect((await gateway.engine.decide(request(a, null))).outcome).toBe('allowed');
      const observer = await watchCommands(redis.url);
      const outcomes = [];
      try {
        await sleep(50);
        for (let i = 0; i < 3; i++) outcomes.push((await gateway.engine.decide(request(a, null))).outcome);
        await sleep(100);
        // Once fallen back, no call tries the function again.
        expect(observer.counts()).toEqual({ evalsha: 3 });
      } finally {
        observer.stop();
      }
      expect(outcomes).toEqual(['allowed', 'allowed', 'api_rate_limited']);
      expect(gateway.logs.filter((line) => line.includes('limits run by EVALSHA'))).toHaveLength(1);
      expect(gateway.logs.join('')).toContain('ERR unknown command');
      expect(await metricValues(gateway.registry, 'gw_limit_script_function')).toEqual({ total: 0 });
    } finally {
      await stopAllGateways();
      await redis.dispose();
    }
  });

  it('the DRL makes no Redis call per request (heartbeats only)', async () => {
    const a = api(uniqueId('drl'), { api_limit: { rate: 10_000, per: 60 } });
    const p = policy('rtt', { rate: { rate: 10_000, per: 60 } });
    const gateway = startGateway(config({ apis: [a], policies: [p] }), testEnv().redisUrl, { heartbeatIntervalMs: 60_000 });
    const req = request(a, { session: session({ apply_policies: ['rtt'] }), raw: uniqueId('key') });
    // Let the first reads of the API's gateways finish (at the start and READ_AGAIN_MS later): MONITOR starts on a quiet Redis.
    await sleep(READ_AGAIN_MS + 200);
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
