import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { limiterKey } from '../../../common/redis-keys.ts';
import { createRedisClient } from '../../../common/redis-url.ts';
import { RedisSessionStore } from '../../../common/session-store.ts';
import { api, config, session } from '../../support/compiled-fixtures.ts';
import { keyHashOf, request } from '../../support/limits-fixtures.ts';
import { startRedisSentinel, type RedisSentinelHandle } from '../../harness/index.ts';
import { metricValues, sleep, uniqueId } from '../limits/helpers.ts';
import { eventually } from '../sidecar/helpers.ts';
import { withReportedSessions } from '../../support/session-changes.ts';
import { burstOutcomes, startGateway, stopAllGateways, waitReady } from './gateways.ts';

let sentinel: RedisSentinelHandle;
beforeAll(async () => {
  sentinel = await startRedisSentinel();
});
afterAll(async () => {
  await sentinel?.dispose();
});
afterEach(stopAllGateways);

const tcpPort = async (redis: Redis): Promise<number> => Number(/^tcp_port:(\d+)/m.exec(await redis.info('server'))?.[1]);

describe('Redis Sentinel through redis+sentinel://', () => {
  it('connects to the master the sentinel names; the engine and the session store work there', async () => {
    const master = await sentinel.masterPort();
    const redis = createRedisClient(sentinel.url, {});
    try {
      await waitReady(redis);
      expect(await tcpPort(redis as Redis)).toBe(master);
      expect(await redis.info('replication')).toMatch(/^role:master/m);

      const store = new RedisSessionStore(redis);
      const hash = keyHashOf(uniqueId('raw'));
      const stored = session({ alias: 'sentinel', rate: 5, per: 60 });
      await store.put(hash, stored);
      expect(await store.get(hash)).toEqual(stored);
      await store.delete(hash);
      expect(await store.get(hash)).toBeNull();
    } finally {
      redis.disconnect();
    }

    const target = api(uniqueId('sn-api'), { api_limit: { rate: 12, per: 10 } });
    const cfg = config({ settings: { enable_redis_rolling_limiter: true, redis_failure_mode: 'closed', redis_timeout_ms: 3000 }, apis: [target] });
    const gateways = [startGateway(cfg, sentinel.url), startGateway(cfg, sentinel.url)];
    await Promise.all(gateways.map((g) => waitReady(g.redis)));
    expect(await burstOutcomes(gateways, request(target, null), 50)).toEqual({ allowed: 12, api_rate_limited: 38 });
  });

  it('after SENTINEL FAILOVER the client follows the new master within 5 s; nothing throws meanwhile; session changes are reported from the new master', async () => {
    await withReportedSessions(createRedisClient(sentinel.url, {}), async ({ store, cache, feed }) => {
      const { figures } = await throughFailover(sentinel, () => sentinel.failover(), 5_000);
      process.stderr.write(`sentinel failover (SENTINEL FAILOVER): ${figures}\n`);

      const hash = keyHashOf(uniqueId('raw'));
      await eventually(async () => feed.tracking && (await store.put(hash, session({ alias: 'before' })).then(() => true, () => false)), 10_000, 'tracking on the new master');
      await eventually(async () => (await cache.get(hash))?.alias === 'before', 10_000, 'the session read');
      await store.put(hash, session({ alias: 'after' }));
      await eventually(async () => (await cache.get(hash))?.alias === 'after', 10_000, 'the change reported');
    });
  });
});

describe('Redis Sentinel: the master process dies', () => {
  let own: RedisSentinelHandle;
  // Its own set: a sentinel starts no second failover of one master within 2 x failover-timeout.
  beforeAll(async () => {
    own = await startRedisSentinel();
  });
  afterAll(async () => {
    await own?.dispose();
  });

  it('the sentinel promotes the replica; the client follows and decisions resume; nothing throws meanwhile', async () => {
    const { figures, errors } = await throughFailover(own, () => own.stopMaster(), 5_000);
    // The dead master cost failed calls; the open failure mode answered them.
    expect(errors).toBeGreaterThan(0);
    process.stderr.write(`sentinel failover (master stopped): ${figures}\n`);
  });
});

/**
 * One gateway (failure mode open) with steady traffic on one API while `failover` runs,
 * then waits until a 1-per-minute limit on another API is enforced again through the new
 * master, at most `boundMs` after the promotion.
 */
async function throughFailover(set: RedisSentinelHandle, failover: () => Promise<number>, boundMs: number) {
  const target = api(uniqueId('sn-failover'), { api_limit: { rate: 1, per: 60 } });
  const steady = api(uniqueId('sn-steady'), { api_limit: { rate: 1_000_000, per: 1 } });
  const settings = { enable_redis_rolling_limiter: true, redis_failure_mode: 'open' as const, redis_timeout_ms: 300 };
  const gateway = startGateway(config({ settings, apis: [target, steady] }), set.url, { commandTimeoutMs: 300 });
  await waitReady(gateway.redis);
  const before = await set.masterPort();

  let running = true;
  const failures: unknown[] = [];
  const outcomes: Record<string, number> = {};
  const traffic = (async () => {
    while (running) {
      try {
        const { outcome } = await gateway.engine.decide(request(steady, null));
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
      } catch (err) {
        failures.push(err);
      }
      await sleep(10);
    }
  })();

  const started = Date.now();
  const after = await failover();
  const promotedAt = Date.now();
  expect(after).not.toBe(before);
  expect(set.dataPorts).toContain(after);

  // Resumed: the client is on the new master and the store answers there again, so the
  // 1-per-minute limit refuses a second call.
  let resumedAt = 0;
  while (!resumedAt && Date.now() < promotedAt + 20_000) {
    const outcome = (await gateway.engine.decide(request(target, null))).outcome;
    const port = await tcpPort(gateway.redis as Redis).catch(() => 0);
    if (outcome === 'api_rate_limited' && port === after) resumedAt = Date.now();
    else await sleep(50);
  }
  running = false;
  await traffic;
  expect(resumedAt).toBeGreaterThan(0);
  // The client follows +switch-master: it does not wait for the old master's demotion
  // (about 10 s later), during which it would count on a master nobody else uses.
  expect(resumedAt - promotedAt).toBeLessThan(boundMs);
  expect(failures).toEqual([]);
  // Open failure mode: the steady API was only ever allowed, Redis or not.
  expect(Object.keys(outcomes)).toEqual(['allowed']);
  // The limiter state now lives on the new master.
  const direct = new Redis({ host: '127.0.0.1', port: after, lazyConnect: true });
  try {
    await direct.connect();
    expect(await direct.exists(limiterKey(`a:${target.api_id}`, 'log'))).toBe(1);
  } finally {
    direct.disconnect();
  }
  const errors = (await metricValues(gateway.metrics.registry, 'gw_redis_errors_total')).total ?? 0;
  const figures = `limits enforced again ${resumedAt - started} ms after the trigger, ${resumedAt - promotedAt} ms after the promotion; ${errors} engine Redis errors; steady decisions ${JSON.stringify(outcomes)}`;
  return { figures, errors };
}
