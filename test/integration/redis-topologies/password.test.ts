import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createRedisClient } from '../../../common/redis-url.ts';
import { RedisSessionStore } from '../../../common/session-store.ts';
import { api, config, session } from '../../support/compiled-fixtures.ts';
import { keyHashOf, request } from '../../support/limits-fixtures.ts';
import { startRedisCluster, startRedisSentinel, startRedisWithPassword, type PasswordRedisHandle } from '../../harness/index.ts';
import { metricValues, sleep, uniqueId } from '../limits/helpers.ts';
import { burstOutcomes, startGateway, stopAllGateways, waitReady } from './gateways.ts';

// Characters a URL must escape: the client has to decode them.
const password = 'gw p@ss:w/rd%7';
let redis: PasswordRedisHandle;
beforeAll(async () => {
  redis = await startRedisWithPassword(password);
});
afterAll(async () => {
  await redis?.dispose();
});
afterEach(stopAllGateways);

const settings = { enable_redis_rolling_limiter: true, redis_timeout_ms: 500 };

describe('password-protected Redis through redis://:password@host:port', () => {
  it('the right password connects; the engine and the session store work', async () => {
    const target = api(uniqueId('pw-api'), { api_limit: { rate: 7, per: 10 } });
    const gateway = startGateway(config({ settings: { ...settings, redis_failure_mode: 'closed' }, apis: [target] }), redis.url);
    await waitReady(gateway.redis);
    expect(await burstOutcomes([gateway], request(target, null), 20)).toEqual({ allowed: 7, api_rate_limited: 13 });

    const client = createRedisClient(redis.url, {});
    try {
      const store = new RedisSessionStore(client);
      const hash = keyHashOf(uniqueId('raw'));
      const stored = session({ alias: 'pw', quota_max: 3 });
      await store.put(hash, stored);
      expect(await store.get(hash)).toEqual(stored);
      await store.delete(hash);
      expect(await store.get(hash)).toBeNull();
    } finally {
      client.disconnect();
    }
  });

  it.each([
    ['a wrong password', 'closed', 'store_unavailable', 'not-the-password-7x'],
    ['a wrong password', 'open', 'allowed', 'not-the-password-7x'],
    ['no password', 'closed', 'store_unavailable', ''],
  ] as const)('%s fails cleanly (failure mode %s: %s), is counted and writes nothing', async (_name, mode, whileFailing, given) => {
    const target = api(uniqueId('pw-bad'), { api_limit: { rate: 1, per: 10 } });
    const url = `redis://${given ? `:${given}@` : ''}127.0.0.1:${redis.port}`;
    const gateway = startGateway(config({ settings: { ...settings, redis_failure_mode: mode }, apis: [target] }), url, { commandTimeoutMs: 500 });
    await sleep(300);
    expect(gateway.redis.status).not.toBe('ready');
    const started = Date.now();
    const decisions = await Promise.all(Array.from({ length: 3 }, () => gateway.engine.decide(request(target, null))));
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(decisions.map((d) => d.outcome)).toEqual(Array(3).fill(whileFailing));
    expect((await metricValues(gateway.metrics.registry, 'gw_redis_errors_total')).total).toBeGreaterThanOrEqual(3);
    expect((await metricValues(gateway.metrics.registry, 'gw_redis_client_errors_total')).total).toBeGreaterThanOrEqual(1);
    // What /readyz names beside the connection's state, so a wrong password reads apart from an outage.
    expect(gateway.lastError()?.message).toMatch(/WRONGPASS|NOAUTH/);
    const logs = gateway.logs.join('');
    expect(logs).toMatch(/WRONGPASS|NOAUTH/);
    if (given) expect(logs).not.toContain(given);

    const admin = new Redis({ host: '127.0.0.1', port: redis.port, password, lazyConnect: true });
    try {
      await admin.connect();
      expect(await admin.keys(`*${target.api_id}*`)).toEqual([]);
    } finally {
      admin.disconnect();
    }
  });
});

describe('the database number of redis://host:port/<db>', () => {
  const keysIn = async (db: number, apiId: string): Promise<string[]> => {
    const admin = new Redis({ host: '127.0.0.1', port: redis.port, password, db, lazyConnect: true });
    try {
      await admin.connect();
      return await admin.keys(`*${apiId}*`);
    } finally {
      admin.disconnect();
    }
  };

  it('is where the counts go', async () => {
    const target = api(uniqueId('db-3'), { api_limit: { rate: 2, per: 10 } });
    const gateway = startGateway(config({ settings: { ...settings, redis_failure_mode: 'closed' }, apis: [target] }), `${redis.url}/3`);
    await waitReady(gateway.redis);
    expect(await burstOutcomes([gateway], request(target, null), 5)).toEqual({ allowed: 2, api_rate_limited: 3 });
    expect(await keysIn(3, target.api_id)).not.toEqual([]);
    expect(await keysIn(0, target.api_id)).toEqual([]);
  });

  it('that the server does not have is a connection error: nothing is written to database 0, and the error names the database', async () => {
    const target = api(uniqueId('db-99'), { api_limit: { rate: 1, per: 10 } });
    const gateway = startGateway(config({ settings: { ...settings, redis_failure_mode: 'open' }, apis: [target] }), `${redis.url}/99`, { commandTimeoutMs: 500 });
    await sleep(500);
    expect(gateway.redis.status).not.toBe('ready');
    const decisions = await Promise.all(Array.from({ length: 3 }, () => gateway.engine.decide(request(target, null))));
    // Failing open: each is admitted, and none is counted anywhere.
    expect(decisions.map((d) => d.outcome)).toEqual(['allowed', 'allowed', 'allowed']);
    expect(gateway.lastError()?.message).toMatch(/^Redis refused database 99 of GW_REDIS_URL \(ERR .*\): the server has fewer databases$/);
    expect(gateway.logs.join('')).toContain('Redis refused database 99');
    expect(await keysIn(0, target.api_id)).toEqual([]);
  });
});

describe('password-protected Cluster and Sentinel (the chart renders :password@ for both)', () => {
  // URL-safe, as the chart's values ask; Sentinel's config file takes it unquoted.
  const nodePassword = 'gw-nodes-pw-42';
  it.each([
    ['redis+cluster://', () => startRedisCluster({ password: nodePassword })],
    ['redis+sentinel://', () => startRedisSentinel({ password: nodePassword })],
  ])('%s with the password: exact limits and sessions; with a wrong one: clean failure', async (_scheme, start) => {
    const set = await start();
    try {
      expect(set.url).toContain(`:${nodePassword}@`);
      const target = api(uniqueId('pw-topo'), { api_limit: { rate: 7, per: 10 } });
      const cfg = config({ settings: { ...settings, redis_failure_mode: 'closed', redis_timeout_ms: 3000 }, apis: [target] });
      const gateway = startGateway(cfg, set.url);
      await waitReady(gateway.redis);
      expect(await burstOutcomes([gateway], request(target, null), 20)).toEqual({ allowed: 7, api_rate_limited: 13 });
      const store = new RedisSessionStore(gateway.redis);
      const hash = keyHashOf(uniqueId('raw'));
      const stored = session({ alias: 'pw-topology' });
      await store.put(hash, stored);
      expect(await store.get(hash)).toEqual(stored);

      const wrong = startGateway(config({ settings: { ...settings, redis_failure_mode: 'closed' }, apis: [target] }), set.url.replace(nodePassword, 'wrong-pw-3'), {
        commandTimeoutMs: 500,
      });
      const started = Date.now();
      const decisions = await Promise.all(Array.from({ length: 3 }, () => wrong.engine.decide(request(target, null))));
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(decisions.map((d) => d.outcome)).toEqual(Array(3).fill('store_unavailable'));
      expect((await metricValues(wrong.metrics.registry, 'gw_redis_errors_total')).total).toBeGreaterThanOrEqual(3);
      expect(wrong.logs.join('')).not.toContain('wrong-pw-3');
    } finally {
      await stopAllGateways();
      await set.dispose();
    }
  });
});
