import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { gatewayHeartbeatKey, limiterKey } from '../../../common/redis-keys.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { testEnv } from '../../harness/index.ts';
import { HandSource } from '../../support/hand-source.ts';
import { keyHashOf } from '../../support/limits-fixtures.ts';
import { call, compiledApi, compiledConfig, eventually, sidecarOptions, startTestSidecar, storeSession, uniqueId, type CallResult } from '../sidecar/helpers.ts';
import { alignTo, sleep } from './helpers.ts';

/**
 * Key isolation at the API level, end to end: three sidecars on one Redis, 200 concurrent
 * callers on two keys of one API. The greedy key's refused requests take nothing from the
 * API's allowance, so the well-behaved key gets all of its share.
 *
 * Numbers chosen so the DRL splits them exactly over 3 gateways: API 48 (16 per gateway),
 * greedy key 9 (3), polite key 39 (13), and 3 + 13 = 16. The greedy key's 161 callers
 * start first; the polite key's 39 (13 to each sidecar) right behind them, all at once.
 * Were refused requests counted at the API level, the greedy key's refusals would use up
 * its allowance before the polite key got its share.
 */
const API_RATE = 48;
const GREEDY_RATE = 9;
const POLITE_RATE = 39;
const CALLERS = 200;
const PER = 4;

const algorithms: [string, Partial<GatewaySettings>][] = [
  ['sliding log', { enable_redis_rolling_limiter: true }],
  ['sentinel', { enable_sentinel_rate_limiter: true }],
  ['fixed window', { enable_fixed_window_rate_limiter: true }],
  ['drl', {}],
];

let upstream: EchoUpstream;
let redis: Redis;
let sidecars: RunningSidecar[] = [];

beforeAll(async () => {
  upstream = await startEchoUpstream();
  redis = new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });
});
afterAll(async () => {
  redis?.disconnect();
  await upstream?.close();
});
afterEach(async () => {
  await Promise.all(sidecars.splice(0).map((s) => s.close()));
});

function count<T>(items: readonly T[], predicate: (item: T) => boolean): number {
  return items.filter(predicate).length;
}

describe('3 sidecars, 200 concurrent callers, two keys of one API', () => {
  it.each(algorithms)('%s: the well-behaved key gets its full share while the other key is refused', async (name, algorithm) => {
    const settings: Partial<GatewaySettings> = { ...algorithm, rate_limit_response_headers: 'rate_limits' };
    const target = compiledApi(uniqueId('iso'), upstream.url, { keyless: false, api_limit: { rate: API_RATE, per: PER } });
    const rights = { access_rights: { [target.api_id]: { api_id: target.api_id } } };
    const greedy = await storeSession(redis, { rate: GREEDY_RATE, per: PER, ...rights });
    const polite = await storeSession(redis, { rate: POLITE_RATE, per: PER, ...rights });
    sidecars = await Promise.all(
      [0, 1, 2].map(() => startTestSidecar(sidecarOptions('default'), { source: new HandSource(compiledConfig([target], settings)) })),
    );
    if (name === 'drl') {
      // Every sidecar has joined, and each has read the others on a later beat (every 2 s).
      const live = gatewayHeartbeatKey(target.api_id);
      await eventually(async () => (await redis.zrangebyscore(live, `(${Date.now()}`, '+inf')).length === 3, 10_000, 'three live sidecars');
      await sleep(2500);
    }
    if (name === 'fixed window') await alignTo(PER * 1000);

    // Callers 0..160 carry the greedy key; 161..199 the polite one (13 per sidecar, round robin).
    const keys = Array.from({ length: CALLERS }, (_, i) => (i < CALLERS - POLITE_RATE ? greedy : polite));
    const answers = await Promise.all(
      keys.map((key, i) => call(`${sidecars[i % 3]!.proxyUrl}/${target.api_id}/`, { headers: { authorization: key } }).then((res) => ({ key, res }))),
    );
    const of = (key: string): CallResult[] => answers.filter((a) => a.key === key).map((a) => a.res);

    const politeAnswers = of(polite);
    expect(politeAnswers.map((r) => r.status)).toEqual(Array(POLITE_RATE).fill(200));
    for (const r of politeAnswers) expect(r.headers['x-ratelimit-limit']).toBeDefined();

    const greedyAnswers = of(greedy);
    expect(count(greedyAnswers, (r) => r.status === 200)).toBe(GREEDY_RATE);
    const refused = greedyAnswers.filter((r) => r.status !== 200);
    expect(refused).toHaveLength(CALLERS - POLITE_RATE - GREEDY_RATE);
    // Refused by the key's own limit, or, once the 48 admissions have used the API's
    // allowance, by the API level, which is evaluated first and whose answer then wins.
    const drl = name === 'drl';
    const byKey = refused.filter((r) => r.json().error === 'Rate Limit Exceeded');
    const byApi = refused.filter((r) => r.json().error === 'API Rate Limit Exceeded');
    expect(byKey.length + byApi.length).toBe(refused.length);
    expect(byKey.length).toBeGreaterThan(0);
    for (const [answers, limit] of [[byKey, drl ? GREEDY_RATE / 3 : GREEDY_RATE], [byApi, drl ? API_RATE / 3 : API_RATE]] as const) {
      for (const r of answers) {
        expect(r.status).toBe(429);
        expect(r.headers['x-ratelimit-limit']).toBe(String(limit));
        expect(r.headers['x-ratelimit-remaining']).toBe('0');
      }
    }

    // What Redis holds: the API level counts only the 48 admitted requests.
    const apiLimiter = `a:${target.api_id}`;
    const greedyLimiter = `k:${keyHashOf(greedy)}:session`;
    const politeLimiter = `k:${keyHashOf(polite)}:session`;
    const held = async (limiterId: string): Promise<number> => {
      if (name === 'fixed window') {
        const [counter, ...more] = await redis.keys(limiterKey(limiterId, 'fw:*'));
        expect(more).toEqual([]);
        return Number(await redis.get(counter!));
      }
      return redis.zcard(limiterKey(limiterId, 'log'));
    };
    if (drl) {
      expect(await redis.keys(`gw:rl:*${target.api_id}*`)).toEqual([]);
      return;
    }
    // The API level holds its 48 admissions, plus the refusals it made itself where the
    // algorithm logs them; the greedy key the requests that reached it where they are logged,
    // and its admissions in a fixed window, which counts no refusal.
    const reachedGreedy = CALLERS - POLITE_RATE - byApi.length;
    const expected = {
      'sliding log': { api: API_RATE + byApi.length, greedy: reachedGreedy, polite: POLITE_RATE },
      sentinel: { api: API_RATE + byApi.length, greedy: reachedGreedy, polite: POLITE_RATE },
      'fixed window': { api: API_RATE, greedy: GREEDY_RATE, polite: POLITE_RATE },
    }[name];
    expect({ api: await held(apiLimiter), greedy: await held(greedyLimiter), polite: await held(politeLimiter) }).toEqual(expected);
  }, 60_000);
});
