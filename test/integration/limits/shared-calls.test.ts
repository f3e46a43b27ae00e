import { afterEach, describe, expect, it } from 'vitest';
import { limiterKey } from '../../../common/redis-keys.ts';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { testEnv } from '../../harness/index.ts';
import { sleep, startGateway, stopAllGateways, uniqueId, watchCommands } from './helpers.ts';

afterEach(stopAllGateways);

/**
 * Decisions due at the same moment share one script call, each still judged alone and in
 * order: as exact as one call each, with fewer calls.
 */
describe('decisions in flight together share script calls', () => {
  it.each([
    ['sliding log', { enable_redis_rolling_limiter: true }],
    ['fixed window', { enable_fixed_window_rate_limiter: true }],
    ['sentinel', { enable_sentinel_rate_limiter: true }],
  ])('%s: 100 concurrent decisions on a limit of 40 admit exactly 40, in fewer calls than decisions', async (_name, settings) => {
    const a = api(uniqueId('shared'), { api_limit: { rate: 40, per: 3600 } });
    const gateway = startGateway(config({ settings, apis: [a] }), testEnv().redisUrl);
    const req = request(a, null);
    // The first call may pay EVAL once (NOSCRIPT); its decision counts like the others.
    await gateway.engine.decide(req);
    const observer = await watchCommands(testEnv().redisUrl);
    try {
      await sleep(50);
      const outcomes = await Promise.all(Array.from({ length: 99 }, () => gateway.engine.decide(req).then((d) => d.outcome)));
      await sleep(100);
      expect(outcomes.filter((o) => o === 'allowed')).toHaveLength(39);
      expect(outcomes.filter((o) => o === 'api_rate_limited')).toHaveLength(60);
      expect(observer.counts().evalsha).toBeLessThan(99);
    } finally {
      observer.stop();
    }
  });

  it('a decision whose commands fail fails alone; the others in its call are answered and counted', async () => {
    const broken = api(uniqueId('broken'), { api_limit: { rate: 10, per: 60 } });
    const sound = api(uniqueId('sound'), { api_limit: { rate: 10, per: 60 } });
    const p = policy('shared', { rate: { rate: 3, per: 60 } });
    const cfg = config({ settings: { enable_redis_rolling_limiter: true, redis_failure_mode: 'closed' }, apis: [broken, sound], policies: [p] });
    const gateway = startGateway(cfg, testEnv().redisUrl);
    // A value of the wrong type where the broken API's log should be: its ZSET commands fail.
    await gateway.redis.set(limiterKey(`a:${broken.api_id}`, 'log'), 'not a log');
    const caller = { session: session({ apply_policies: ['shared'] }), raw: uniqueId('key') };
    const decisions = await Promise.all([
      gateway.engine.decide(request(sound, caller)),
      gateway.engine.decide(request(broken, caller)),
      gateway.engine.decide(request(sound, caller)),
    ]);
    expect(decisions.map((d) => d.outcome)).toEqual(['allowed', 'store_unavailable', 'allowed']);
    // Its own error, as Redis raised it, is what the log says.
    expect(gateway.logs.join('\n')).toMatch(/"message":"WRONGTYPE Operation against a key holding the wrong kind of value".*"msg":"rate-limit store unreachable"/);
    // The two answered decisions took two of the key's three; a third is still admitted, a fourth not.
    expect((await gateway.engine.decide(request(sound, caller))).outcome).toBe('allowed');
    expect((await gateway.engine.decide(request(sound, caller))).outcome).toBe('key_rate_limited');
  });
});
