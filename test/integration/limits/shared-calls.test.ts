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
    // The first call may load the limit function once; its decision counts like the others.
    await gateway.engine.decide(req);
    const observer = await watchCommands(testEnv().redisUrl);
    try {
      await sleep(50);
      const outcomes = await Promise.all(Array.from({ length: 99 }, async () => (await gateway.engine.decide(req)).outcome));
      await sleep(100);
      expect(outcomes.filter((o) => o === 'allowed')).toHaveLength(39);
      expect(outcomes.filter((o) => o === 'api_rate_limited')).toHaveLength(60);
      expect(observer.counts().fcall).toBeLessThan(99);
    } finally {
      observer.stop();
    }
  });

  it('a log emptied by an undo in a call is trimmed, expired and read afresh by the next request of that call', async () => {
    // The script skips the trim, the expiry and the oldest-entry read of a log it has already
    // visited in the call; an undo must make it forget the log (here: the log's only entry goes,
    // and with it the key and its expiry).
    const limited = api(uniqueId('limited'), { api_limit: { rate: 100, per: 60 } });
    const open = api(uniqueId('open'));
    const settings = { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' as const };
    const gateway = startGateway(config({ settings, apis: [limited, open] }), testEnv().redisUrl);
    const spent = { session: session({ rate: 100, per: 60, quota_max: 1, quota_renewal_rate: 3600 }), raw: uniqueId('spent') };
    const fresh = { session: session({ rate: 100, per: 60 }), raw: uniqueId('fresh') };
    // The spent key uses its one quota on the other API, so the limited API's log is still empty.
    expect((await gateway.engine.decide(request(open, spent))).outcome).toBe('allowed');
    const observer = await watchCommands(testEnv().redisUrl);
    let decisions;
    try {
      decisions = await Promise.all([gateway.engine.decide(request(limited, spent)), gateway.engine.decide(request(limited, fresh))]);
      await sleep(100);
      // Both in one call: the spent key's API admission is undone in it, before the fresh key's request.
      expect(observer.counts().fcall).toBe(1);
    } finally {
      observer.stop();
    }
    expect(decisions.map((d) => d.outcome)).toEqual(['quota_exceeded', 'allowed']);
    const log = limiterKey(`a:${limited.api_id}`, 'log');
    expect(await gateway.redis.zcard(log)).toBe(1);
    const ttl = await gateway.redis.pttl(log);
    expect(ttl).toBeGreaterThan(50_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    // The fresh key's API row: one used of 100, its window ending a period after its own entry.
    const row = decisions[1]!.rate!;
    expect(row.remaining).toBe(99);
    expect(row.reset * 1000 - gateway.lastNow()).toBeGreaterThan(59_000);
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
