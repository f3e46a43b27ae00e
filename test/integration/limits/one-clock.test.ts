import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { limiterKey } from '../../../common/redis-keys.ts';
import { api, config } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import type { LimitRequest } from '../../../sidecar/limits/types.ts';
import { testEnv } from '../../harness/index.ts';
import { alignTo, sleep, startGateway, stopAllGateways, uniqueId, type Gateway } from './helpers.ts';

afterEach(stopAllGateways);

/**
 * One clock for every gateway: limiters in Redis read Redis's time, so two gateways whose
 * own clocks are 5 s apart share one window exactly. With each gateway's own time, the
 * one ahead would see every entry of the other as expired (or count in another fixed
 * window) and admit a second allowance.
 */
const skewMs = 5000;

async function redisNow(redis: Redis): Promise<number> {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

async function outcomes(gateway: Gateway, req: LimitRequest, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push((await gateway.engine.decide(req)).outcome);
  return out;
}

function twoGateways(settings: Partial<GatewaySettings>, apiLimit: { rate: number; per: number }) {
  const a = api(uniqueId('clock'), { api_limit: apiLimit });
  const cfg = config({ settings, apis: [a] });
  const behind = startGateway(cfg, testEnv().redisUrl);
  const ahead = startGateway(cfg, testEnv().redisUrl, { clockOffsetMs: skewMs });
  return { a, behind, ahead, req: request(a, null) };
}

describe('one clock: gateways 5 s apart share one window', () => {
  it('sliding log: one log, entries stamped with Redis time, one spike arrest, one reopening', async () => {
    // Rate-limit headers on: the sliding log then reports its reset (the oldest entry's).
    const { a, behind, ahead, req } = twoGateways({ enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' }, { rate: 6, per: 2 });
    const log = limiterKey(`a:${a.api_id}`, 'log');
    const from = await redisNow(behind.redis);
    expect(await outcomes(behind, req, 3)).toEqual(['allowed', 'allowed', 'allowed']);
    expect(await outcomes(ahead, req, 4)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
    expect(await outcomes(behind, req, 1)).toEqual(['api_rate_limited']);
    const to = await redisNow(behind.redis);

    // Eight entries, refusals included, every one at Redis's time: none 5 s ahead.
    const withScores: string[] = await behind.redis.zrange(log, '0', '-1', 'WITHSCORES');
    const scores = withScores.filter((_, i) => i % 2 === 1).map(Number);
    expect(scores).toHaveLength(8);
    for (const score of scores) {
      expect(score).toBeGreaterThanOrEqual(from);
      expect(score).toBeLessThanOrEqual(to);
    }
    // Both gateways report a refused request's reset on Redis's clock: when it would be admitted
    // again, once all but rate − 1 entries have left the window, that is `per` after the entry at
    // place n − rate, n counting the request's own (docs/behaviour.md#response-headers). The
    // first of the two meets 9 entries, the second 10.
    const sorted = [...scores].sort((x, y) => x - y);
    const readmitted = (place: number): number => Math.ceil((sorted[place]! + 2000) / 1000);
    const resetBehind = await behind.engine.decide(req);
    const resetAhead = await ahead.engine.decide(req);
    expect(resetBehind.rate?.reset).toBe(readmitted(9 - 6));
    expect(resetAhead.rate?.reset).toBe(readmitted(10 - 6));

    // Knocking from either side keeps it closed (both logged); a quiet window reopens it for both.
    await sleep(1000);
    expect(await outcomes(ahead, req, 1)).toEqual(['api_rate_limited']);
    expect(await outcomes(behind, req, 1)).toEqual(['api_rate_limited']);
    await sleep(2100);
    expect(await outcomes(ahead, req, 3)).toEqual(['allowed', 'allowed', 'allowed']);
    expect(await outcomes(behind, req, 4)).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
    expect(await behind.redis.zcard(log)).toBe(7);
  });

  it('fixed window: one counter, in the window of Redis time', async () => {
    // 4 s windows; start 2.1 s into one, where a clock 5 s ahead would be in the next window.
    const { a, behind, ahead, req } = twoGateways({ enable_fixed_window_rate_limiter: true }, { rate: 4, per: 4 });
    await alignTo(4000, 2100);
    const windowStart = Math.floor((await redisNow(behind.redis)) / 4000) * 4000;
    expect(await outcomes(behind, req, 2)).toEqual(['allowed', 'allowed']);
    expect(await outcomes(ahead, req, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    expect(await outcomes(behind, req, 1)).toEqual(['api_rate_limited']);
    const counters = await behind.redis.keys(`${limiterKey(`a:${a.api_id}`, 'fw')}:*`);
    expect(counters).toEqual([limiterKey(`a:${a.api_id}`, `fw:4000:${windowStart}`)]);
    // The 4 admitted; refusals are not counted.
    expect(await behind.redis.get(counters[0]!)).toBe('4');
    const decision = await ahead.engine.decide(req);
    expect(decision.rate).toEqual({ limit: 4, remaining: 0, reset: (windowStart + 4000) / 1000 });
  });

  it('sentinel: one count of the window; the block ends for both at once', async () => {
    const { a, behind, ahead, req } = twoGateways({ enable_sentinel_rate_limiter: true }, { rate: 3, per: 2 });
    expect(await outcomes(behind, req, 2)).toEqual(['allowed', 'allowed']);
    expect(await outcomes(ahead, req, 2)).toEqual(['allowed', 'api_rate_limited']);
    expect(await outcomes(behind, req, 1)).toEqual(['api_rate_limited']);
    // The background trim of the gateway ahead runs on Redis's time too: nothing trimmed early
    // (three admitted requests and two refused ones, each logged).
    await sleep(200);
    expect(await behind.redis.zcard(limiterKey(`a:${a.api_id}`, 'log'))).toBe(5);
    await sleep(2000);
    expect(await outcomes(ahead, req, 2)).toEqual(['allowed', 'allowed']);
    expect(await outcomes(behind, req, 2)).toEqual(['allowed', 'api_rate_limited']);
  });
});
