import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { limiterKey, quotaKey } from '../../../common/redis-keys.ts';
import type { CompiledConfig } from '../../../crds/compiled.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { createLimitBackends } from '../../../sidecar/limits/backends.ts';
import { createLimitEngine } from '../../../sidecar/limits/engine.ts';
import type { LimitEngine, LimitRequest } from '../../../sidecar/limits/types.ts';
import { api, config, session } from '../../support/compiled-fixtures.ts';
import { collectingSink, keyHashOf, request, silentLogger } from '../../support/limits-fixtures.ts';
import { testEnv } from '../../harness/index.ts';
import { startGateway, stopAllGateways, uniqueId } from './helpers.ts';

/**
 * A refused request consumes nothing at the levels that admitted it, the same on both
 * stores: the in-memory store (standalone, folder mode) and Redis (the Lua script). On
 * Redis the state left behind is read back: what each limiter recorded.
 */

const memoryEngines: LimitEngine[] = [];
afterEach(async () => {
  await Promise.all(memoryEngines.splice(0).map((engine) => engine.close()));
  await stopAllGateways();
});

type Algorithm = 'sliding log' | 'sentinel' | 'fixed window' | 'drl';
const algorithms: [Algorithm, Partial<GatewaySettings>][] = [
  ['sliding log', { enable_redis_rolling_limiter: true }],
  ['sentinel', { enable_sentinel_rate_limiter: true }],
  ['fixed window', { enable_fixed_window_rate_limiter: true }],
  ['drl', {}],
];
const cases = (['memory', 'redis'] as const).flatMap((store) => algorithms.map(([name, settings]) => [store, name, settings] as const));

function engineOn(store: 'memory' | 'redis', cfg: CompiledConfig): { engine: LimitEngine; redis: Redis | null } {
  if (store === 'redis') {
    const gateway = startGateway(cfg, testEnv().redisUrl);
    return { engine: gateway.engine, redis: gateway.redis };
  }
  const engine = createLimitEngine({
    config: cfg,
    backends: createLimitBackends({ instanceId: uniqueId('memory'), logger: silentLogger }),
    events: collectingSink(),
    logger: silentLogger,
  });
  memoryEngines.push(engine);
  return { engine, redis: null };
}

async function outcomes(engine: LimitEngine, req: LimitRequest, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push((await engine.decide(req)).outcome);
  return out;
}

/** What one limiter holds in Redis: log entries, or the window's count; null when it has no key at all. */
async function recorded(redis: Redis, limiterId: string, algorithm: Algorithm): Promise<number | null> {
  const keys = await redis.keys(limiterKey(limiterId, '*'));
  if (keys.length === 0) return null;
  if (algorithm === 'fixed window') {
    const counters = keys.filter((k) => k.includes(':fw:'));
    expect(counters).toHaveLength(1);
    return Number(await redis.get(counters[0]!));
  }
  return redis.zcard(limiterKey(limiterId, 'log'));
}

const keyLimiter = (raw: string): string => `k:${keyHashOf(raw)}:session`;

/** What the API's limiter and two keys' limiters hold, in that order. */
async function recordedAll(redis: Redis, algorithm: Algorithm, apiId: string, raws: [string, string]): Promise<(number | null)[]> {
  const held: (number | null)[] = [];
  for (const limiterId of [`a:${apiId}`, ...raws.map(keyLimiter)]) held.push(await recorded(redis, limiterId, algorithm));
  return held;
}

describe.each(cases)('%s store, %s', (store, algorithm, settings) => {
  it('key-level refusals take nothing from the API level: the other key gets the rest of it', async () => {
    const a = api(uniqueId('refund'), { api_limit: { rate: 4, per: 10 } });
    const { engine, redis } = engineOn(store, config({ settings, apis: [a] }));
    const greedy = { session: session({ rate: 2, per: 10 }), raw: uniqueId('greedy') };
    const polite = { session: session({ rate: 100, per: 10 }), raw: uniqueId('polite') };
    expect(await outcomes(engine, request(a, greedy), 5)).toEqual(['allowed', 'allowed', 'key_rate_limited', 'key_rate_limited', 'key_rate_limited']);
    expect(await outcomes(engine, request(a, polite), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    if (!redis) return;
    // [API, greedy key, polite key]: the logs also hold the refusals of the level that refused
    // (the sentinel logs them as the sliding log does, besides its flag); a fixed window counts
    // only what it admitted.
    const expected: Record<Algorithm, (number | null)[]> = {
      'sliding log': [5, 5, 2],
      sentinel: [5, 5, 2],
      'fixed window': [4, 2, 2],
      drl: [null, null, null],
    };
    expect(await recordedAll(redis, algorithm, a.api_id, [greedy.raw, polite.raw])).toEqual(expected[algorithm]);
    if (algorithm === 'sentinel') {
      expect(await redis.pttl(limiterKey(`a:${a.api_id}`, 'sentinel'))).toBeGreaterThan(0);
      expect(await redis.pttl(limiterKey(keyLimiter(greedy.raw), 'sentinel'))).toBeGreaterThan(0);
      expect(await redis.exists(limiterKey(keyLimiter(polite.raw), 'sentinel'))).toBe(0);
    }
  });

  it('a refused quota gives the rate allowances back; the quota itself stays spent', async () => {
    const a = api(uniqueId('refund'), { api_limit: { rate: 3, per: 10 } });
    const { engine, redis } = engineOn(store, config({ settings, apis: [a] }));
    const spent = { session: session({ rate: 2, per: 10, quota_max: 1, quota_renewal_rate: 3600 }), raw: uniqueId('spent') };
    const polite = { session: session({ rate: 100, per: 10 }), raw: uniqueId('polite') };
    expect(await outcomes(engine, request(a, spent), 4)).toEqual(['allowed', 'quota_exceeded', 'quota_exceeded', 'quota_exceeded']);
    expect(await outcomes(engine, request(a, polite), 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    if (!redis) return;
    expect(await redis.hget(quotaKey(keyLimiter(spent.raw)), 'r')).toBe('0');
    // [API, spent key, polite key]: the spent key's limiter keeps its one admitted request;
    // the polite key's third request was refused by the API before reaching its key.
    const expected: Record<Algorithm, (number | null)[]> = {
      'sliding log': [4, 1, 2],
      sentinel: [4, 1, 2],
      'fixed window': [3, 1, 2],
      drl: [null, null, null],
    };
    expect(await recordedAll(redis, algorithm, a.api_id, [spent.raw, polite.raw])).toEqual(expected[algorithm]);
  });

  it('when both levels would refuse, the API answer wins and the key level and quota are not touched', async () => {
    const a = api(uniqueId('refund'), { api_limit: { rate: 1, per: 10 } });
    const b = api(uniqueId('other'));
    const { engine, redis } = engineOn(store, config({ settings, apis: [a, b] }));
    const caller = { session: session({ rate: 2, per: 10, quota_max: 5, quota_renewal_rate: 3600 }), raw: uniqueId('key') };
    expect(await outcomes(engine, request(a, caller), 3)).toEqual(['allowed', 'api_rate_limited', 'api_rate_limited']);
    expect(await outcomes(engine, request(b, caller), 2)).toEqual(['allowed', 'key_rate_limited']);
    if (!redis) return;
    expect(await redis.hget(quotaKey(keyLimiter(caller.raw)), 'r')).toBe('3');
  });
});
