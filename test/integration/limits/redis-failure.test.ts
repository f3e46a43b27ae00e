import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { api, config, session } from '../../support/compiled-fixtures.ts';
import { failuresReporter, request } from '../../support/limits-fixtures.ts';
import { Redis as IORedis } from 'ioredis';
import { limiterKey, quotaKey } from '../../../common/redis-keys.ts';
import { StoreDisconnectedError } from '../../../sidecar/limits/errors.ts';
import { STORE_STEADY_MS } from '../../../sidecar/limits/store-health.ts';
import { RedisLimitStore } from '../../../sidecar/limits/stores/redis-store.ts';
import { sidecarRedisOptions } from '../../../sidecar/redis.ts';
import { defaultGatewaySettings } from '../../../crds/settings.ts';
import { startRedis, type RedisHandle } from '../../harness/index.ts';
import { metricValues, sleep, startGateway, stopAllGateways, uniqueId, type Gateway } from './helpers.ts';

let redis: RedisHandle;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis.dispose();
});
afterEach(async () => {
  await stopAllGateways();
  await redis.start();
});

async function waitUntil(done: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!done() && Date.now() < deadline) await sleep(50);
  expect(done()).toBe(true);
}

/** The first decision once the gateway's Redis connection is up again (the store sends nothing before). */
async function waitUntilServing(gateway: Gateway, attempt: () => Promise<string>): Promise<string> {
  const deadline = Date.now() + 10_000;
  while (gateway.redis.status !== 'ready' && Date.now() < deadline) await sleep(100);
  return attempt();
}

describe('Redis stopped in the middle of a test', () => {
  it.each([
    ['open', 'allowed'],
    ['closed', 'store_unavailable'],
  ] as const)('failure mode %s: %s while Redis is down, limits again once it is back', async (mode, whileDown) => {
    const a = api(uniqueId('outage'), { api_limit: { rate: 2, per: 1 } });
    const settings = { enable_redis_rolling_limiter: true, redis_failure_mode: mode, redis_timeout_ms: 200 };
    const gateway = startGateway(config({ settings, apis: [a] }), redis.url);
    const caller = { session: session({ quota_max: 100, quota_renewal_rate: 3600 }), raw: uniqueId('key') };
    const req = request(a, caller);
    expect((await gateway.engine.decide(req)).outcome).toBe('allowed');

    await redis.stop();
    const started = Date.now();
    const during = await Promise.all(Array.from({ length: 5 }, () => gateway.engine.decide(req)));
    // Bounded by redis_timeout_ms, not by the client's reconnect loop.
    expect(Date.now() - started).toBeLessThan(2000);
    expect(during.map((d) => d.outcome)).toEqual(Array(5).fill(whileDown));
    expect(during[0]).toMatchObject({ rate: null, quota: null });
    expect(await gateway.engine.decide(req)).toMatchObject({ outcome: whileDown });
    expect((await metricValues(gateway.registry, 'gw_redis_errors_total')).total).toBeGreaterThanOrEqual(6);
    const outageLines = gateway.logs.filter((line) => line.includes('rate-limit store unreachable'));
    expect(outageLines).toHaveLength(1);
    expect(outageLines[0]).toContain(`"failureMode":"${mode}"`);
    // The error itself, through pino's err serializer: its type, message and stack.
    const { err } = JSON.parse(outageLines[0]!) as { err: { type: string; message: string; stack: string } };
    expect(err.type).toMatch(/Error$/);
    expect(err.message.length).toBeGreaterThan(0);
    expect(err.stack).toContain(err.message);

    await redis.start();
    await sleep(1100);
    const first = await waitUntilServing(gateway, async () => (await gateway.engine.decide(req)).outcome);
    expect(first).toBe('allowed');
    expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
    expect((await gateway.engine.decide(req)).outcome).toBe('api_rate_limited');
    // Logged once calls have gone on succeeding for a while, and once.
    const deadline = Date.now() + STORE_STEADY_MS + 3_000;
    while (Date.now() < deadline && !gateway.logs.some((l) => l.includes('reachable again'))) await sleep(100);
    expect(gateway.logs.filter((line) => line.includes('rate-limit store reachable again'))).toHaveLength(1);
    // Counted under the limit the store would have counted; failing open, apart from requests no limit applies to.
    const decisions = await metricValues(gateway.registry, 'gw_limit_decisions_total');
    expect(decisions[`sliding_log/${mode === 'open' ? 'allowed_without_store' : whileDown}`]).toBe(6);
    expect(decisions['none/allowed']).toBeUndefined();
  });

  it('the store sends no call while its lost connection is down, so none runs once it is back', async () => {
    const client = new IORedis(redis.url, sidecarRedisOptions(200));
    client.on('error', () => undefined);
    const store = new RedisLimitStore(client, { instanceId: uniqueId('late'), reporter: failuresReporter() });
    const limiterId = uniqueId('late-limiter');
    const op = { kind: 'sliding_log', limiterId, rate: 5, perMs: 60_000, smoothing: null } as const;
    store.configure({ ...defaultGatewaySettings, redis_timeout_ms: 100 });
    await waitUntil(() => client.status === 'ready');
    // The connection drops and the client is back 200 ms later (its first reconnect): a call
    // queued meanwhile would time out at 100 ms, its request answered, and then run.
    const closed = new Promise((resolve) => client.once('close', resolve));
    client.disconnect(true);
    await closed;
    await expect(store.run([op], false)).rejects.toThrow(StoreDisconnectedError);
    await waitUntil(() => client.status === 'ready');
    await sleep(300);
    const admin = new IORedis(redis.url);
    try {
      expect(await admin.zcard(limiterKey(limiterId, 'log'))).toBe(0);
    } finally {
      admin.disconnect();
      client.disconnect();
    }
  });

  it('a call Redis runs after its gateway stopped waiting (a stall) counts nothing, limits and quota alike', async () => {
    const client = new IORedis(redis.url, sidecarRedisOptions(200));
    client.on('error', () => undefined);
    const store = new RedisLimitStore(client, { instanceId: uniqueId('stall'), reporter: failuresReporter() });
    const limiterId = uniqueId('stall-limiter');
    const quotaId = uniqueId('stall-quota');
    const ops = [
      { kind: 'sliding_log', limiterId, rate: 5, perMs: 60_000, smoothing: null },
      { kind: 'quota', quotaId, max: 10, renewalMs: 3_600_000, initRemaining: 10, initRenewsMs: 0 },
    ] as const;
    store.configure({ ...defaultGatewaySettings, redis_timeout_ms: 100 });
    const admin = new IORedis(redis.url);
    try {
      await waitUntil(() => client.status === 'ready');
      expect((await store.run(ops, false)).map((r) => r.allowed)).toEqual([true, true]);
      // Redis holds every command for 2.5 s, with the connection up, as a stalled server does:
      // longer than the timeout and any slack the deadline has (1 s for other servers' clocks).
      await admin.call('CLIENT', 'PAUSE', '2500', 'ALL');
      const during = await Promise.allSettled([store.run(ops, false), store.run(ops, false), store.run(ops, false)]);
      expect(during.map((d) => d.status)).toEqual(['rejected', 'rejected', 'rejected']);
      await sleep(2_800);
      expect(await admin.zcard(limiterKey(limiterId, 'log'))).toBe(1);
      expect(await admin.hget(quotaKey(quotaId), 'r')).toBe('9');
      // Once Redis answers in time again, calls count as before.
      expect((await store.run(ops, false)).map((r) => r.remaining)).toEqual([3, 8]);
    } finally {
      admin.disconnect();
      client.disconnect();
    }
  });

  it('on one server, a stall just past the timeout counts nothing either: its deadline has no slack for other clocks', async () => {
    const client = new IORedis(redis.url, sidecarRedisOptions(200));
    client.on('error', () => undefined);
    const store = new RedisLimitStore(client, { instanceId: uniqueId('short-stall'), reporter: failuresReporter() });
    const quotaId = uniqueId('short-stall-quota');
    const ops = [{ kind: 'quota', quotaId, max: 10, renewalMs: 3_600_000, initRemaining: 10, initRenewsMs: 0 }] as const;
    store.configure({ ...defaultGatewaySettings, redis_timeout_ms: 100 });
    const admin = new IORedis(redis.url);
    try {
      await waitUntil(() => client.status === 'ready');
      expect((await store.run(ops, false)).map((r) => r.remaining)).toEqual([9]);
      // 600 ms: well past the 100 ms timeout, well within the second a Cluster's clocks are given.
      await admin.call('CLIENT', 'PAUSE', '600', 'ALL');
      const during = await Promise.allSettled([store.run(ops, false), store.run(ops, false)]);
      expect(during.map((d) => d.status)).toEqual(['rejected', 'rejected']);
      await sleep(800);
      expect(await admin.hget(quotaKey(quotaId), 'r')).toBe('9');
      expect((await store.run(ops, false)).map((r) => r.remaining)).toEqual([8]);
    } finally {
      admin.disconnect();
      client.disconnect();
    }
  });

  it('the DRL keeps deciding while heartbeats fail, and heartbeats resume', async () => {
    const a = api(uniqueId('outage-drl'), { api_limit: { rate: 3, per: 60 } });
    const instanceId = uniqueId('gw');
    const gateway = startGateway(config({ apis: [a] }), redis.url, { heartbeatIntervalMs: 100, instanceId });
    await sleep(300);
    await redis.stop();
    await sleep(400);
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push((await gateway.engine.decide(request(a, null))).outcome);
    expect(outcomes).toEqual(['allowed', 'allowed', 'allowed', 'api_rate_limited']);
    expect((await metricValues(gateway.registry, 'gw_redis_errors_total')).total).toBeGreaterThan(0);
    await redis.start();
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !gateway.logs.some((l) => l.includes('reachable again'))) await sleep(100);
    // Redis came back empty (no persistence): the next beats put this gateway back.
    expect(Number(await gateway.redis.zscore(`gw:gateways:${a.api_id}`, instanceId))).toBeGreaterThan(Date.now());
  });
});
