import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import calculateSlot from 'cluster-key-slot';
import { Cluster, type Redis } from 'ioredis';
import { limiterKey, sessionKey } from '../../../common/redis-keys.ts';
import { createRedisClient } from '../../../common/redis-url.ts';
import { RedisSessionStore } from '../../../common/session-store.ts';
import { reportedSessionCache } from '../../../sidecar/auth/session-changes.ts';
import { sidecarRedisOptions } from '../../../sidecar/redis.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { api, config, session } from '../../support/compiled-fixtures.ts';
import { keyHashOf, request } from '../../support/limits-fixtures.ts';
import { startRedisCluster, type RedisClusterHandle } from '../../harness/index.ts';
import { alignTo, metricValues, sleep, uniqueId } from '../limits/helpers.ts';
import { burstOutcomes, startGateway, stopAllGateways, waitReady } from './gateways.ts';
import { call, compiledApi, compiledConfig, eventually, quietLogger, sidecarOptions, startTestSidecar, storeSession } from '../sidecar/helpers.ts';
import { startEchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { HandSource } from '../../support/hand-source.ts';
import { gatewayTold, killReportConnection, trackedKeys, withReportedSessions } from '../../support/session-changes.ts';

let cluster: RedisClusterHandle;
beforeAll(async () => {
  cluster = await startRedisCluster();
});
afterAll(async () => {
  await cluster?.dispose();
});
afterEach(stopAllGateways);

/** Every key of every master, with the slot Redis computes for it. */
async function keysBySlot(redis: Cluster): Promise<Array<{ key: string; slot: number; node: string }>> {
  const found: Array<{ key: string; slot: number; node: string }> = [];
  for (const node of redis.nodes('master')) {
    const name = `${node.options.host}:${node.options.port}`;
    for (const key of await scanAll(node)) found.push({ key, slot: Number(await node.cluster('KEYSLOT', key)), node: name });
  }
  return found;
}

async function scanAll(node: Redis): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await node.scan(cursor, 'MATCH', 'gw:*', 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

const nodeName = (node: Redis): string => `${node.options.host}:${node.options.port}`;

/** A gateway's session cache on its own Cluster client, wired as the sidecar wires it, recording the sessions it is told changed. */
const clusterGateway = (url: string) => gatewayTold(url, 'tracked reads', quietLogger, { ttlMs: 20, trackedTtlMs: 60_000 });

const hashTag = (key: string): string => /\{([^}]+)\}/.exec(key)?.[1] ?? '';

describe('Redis Cluster through redis+cluster://', () => {
  it('connects from two seed nodes and discovers all three masters', async () => {
    const redis = createRedisClient(cluster.url, { lazyConnect: false });
    try {
      expect(redis).toBeInstanceOf(Cluster);
      await waitReady(redis);
      expect(String(await redis.cluster('INFO'))).toContain('cluster_state:ok');
      expect((redis as Cluster).nodes('master').map((n) => n.options.port).sort()).toEqual([...cluster.ports].sort());
      // Keys on different slots reach their own masters.
      for (let i = 0; i < 30; i++) await redis.set(`probe:${i}`, String(i));
      const values = await Promise.all(Array.from({ length: 30 }, (_, i) => redis.get(`probe:${i}`)));
      expect(values).toEqual(Array.from({ length: 30 }, (_, i) => String(i)));
      await Promise.all(Array.from({ length: 30 }, (_, i) => redis.del(`probe:${i}`)));
    } finally {
      redis.disconnect();
    }
  });

  const algorithms: [string, Partial<GatewaySettings>][] = [
    ['sliding log', { enable_redis_rolling_limiter: true }],
    ['sentinel', { enable_sentinel_rate_limiter: true }],
    ['fixed window', { enable_fixed_window_rate_limiter: true }],
  ];

  it.each(algorithms)('%s: API limit, key limit and quota each admit exactly their allowance across 2 gateways', async (name, algorithm) => {
    // A generous timeout and failure mode closed: a slow store shows up as a refusal of its
    // own kind, never as extra admissions.
    const settings = { ...algorithm, redis_failure_mode: 'closed' as const, redis_timeout_ms: 3000 };
    const limited = api(uniqueId('cl-api'), { api_limit: { rate: 20, per: 4 } });
    const open = api(uniqueId('cl-open'));
    const cfg = config({ settings, apis: [limited, open] });
    const gateways = [startGateway(cfg, cluster.url), startGateway(cfg, cluster.url)];
    await Promise.all(gateways.map((g) => waitReady(g.redis)));
    const caller = (input: Record<string, unknown>) => ({ session: session({ quota_renewal_rate: 3600, ...input }), raw: uniqueId('key') });
    const byApi = request(limited, caller({ rate: 1000, per: 4, quota_max: 1000 }));
    const byKey = request(open, caller({ rate: 15, per: 4, quota_max: 1000 }));
    const byQuota = request(open, caller({ rate: 1000, per: 4, quota_max: 10 }));
    // Fixed windows are aligned to per: start the bursts just after a boundary.
    if (name === 'fixed window') await alignTo(4000);
    const [apiOut, keyOut, quotaOut] = await Promise.all([
      burstOutcomes(gateways, byApi, 60),
      burstOutcomes(gateways, byKey, 60),
      burstOutcomes(gateways, byQuota, 60),
    ]);
    expect(apiOut).toEqual({ allowed: 20, api_rate_limited: 40 });
    expect(keyOut).toEqual({ allowed: 15, key_rate_limited: 45 });
    expect(quotaOut).toEqual({ allowed: 10, quota_exceeded: 50 });
    // As Redis Functions, as on one server: a Cluster of Redis 7 does not refuse them.
    for (const gateway of gateways) {
      expect(await metricValues(gateway.metrics.registry, 'gw_limit_script_function')).toEqual({ total: 1 });
      expect(gateway.logs.filter((line) => line.includes('refused Redis Functions'))).toEqual([]);
    }

    // Every key of one limiter sits in the slot of its hash tag, on one master.
    await sleep(100);
    const keys = await keysBySlot(gateways[0]!.redis as Cluster);
    const byTag = new Map<string, typeof keys>();
    for (const k of keys) byTag.set(hashTag(k.key), [...(byTag.get(hashTag(k.key)) ?? []), k]);
    // The API limiter and three key limiters; a key's quota shares its limiter's tag.
    expect(byTag.size).toBeGreaterThanOrEqual(4);
    expect([...byTag.keys()].some((tag) => tag.includes(limited.api_id))).toBe(true);
    const admin = gateways[0]!.redis;
    for (const [tag, group] of byTag) {
      const tagSlot = Number(await admin.cluster('KEYSLOT', `{${tag}}`));
      expect(new Set(group.map((k) => k.slot))).toEqual(new Set([tagSlot]));
      expect(new Set(group.map((k) => k.node)).size).toBe(1);
    }
    // The limiters of one request live in different slots: why each runs as its own script.
    expect(new Set(keys.map((k) => k.slot)).size).toBeGreaterThan(1);
    // Several keys under one tag (a key's counter and its quota; the sentinel's log and
    // block flag), so the one-slot check above bites.
    expect([...byTag.values()].some((group) => new Set(group.map((k) => k.key)).size >= 2)).toBe(true);
  });

  it('DRL heartbeats count the gateways on the cluster and split the rate', async () => {
    const target = api(uniqueId('cl-drl'), { api_limit: { rate: 31, per: 60 } });
    const cfg = config({ apis: [target] });
    const gateways = [startGateway(cfg, cluster.url), startGateway(cfg, cluster.url)];
    await Promise.all(gateways.map((g) => waitReady(g.redis)));
    await sleep(700);
    const members = await gateways[0]!.redis.zrangebyscore(`gw:gateways:${target.api_id}`, `(${Date.now()}`, '+inf');
    expect(members).toHaveLength(2);
    const perGateway = await Promise.all(gateways.map((g) => burstOutcomes([g], request(target, null), 40)));
    expect(perGateway).toEqual([
      { allowed: 15, api_rate_limited: 25 },
      { allowed: 15, api_rate_limited: 25 },
    ]);
  });

  it('RedisSessionStore puts, gets and deletes sessions on the cluster', async () => {
    const redis = createRedisClient(cluster.url, {});
    try {
      const store = new RedisSessionStore(redis);
      const hashes = Array.from({ length: 10 }, () => keyHashOf(uniqueId('raw')));
      const stored = hashes.map((_, i) => session({ alias: `k${i}`, rate: i + 1, per: 60 }));
      await Promise.all(hashes.map((h, i) => store.put(h, stored[i]!)));
      expect(await Promise.all(hashes.map((h) => store.get(h)))).toEqual(stored);
      await store.delete(hashes[0]!);
      expect(await store.get(hashes[0]!)).toBeNull();
      expect(await store.get(hashes[1]!)).toEqual(stored[1]);
      // A value that no longer parses reads as absent, not as a crash.
      await redis.set(`gw:session:${hashes[2]}`, '{not json');
      expect(await store.get(hashes[2]!)).toBeNull();
      await Promise.all(hashes.map((h) => store.delete(h)));
    } finally {
      redis.disconnect();
    }
  });

  it('every master reports the changes of the sessions it holds; one report connection lost, every session is read again', async () => {
    const redis = createRedisClient(cluster.url, {}) as Cluster;
    await withReportedSessions(redis, async ({ store, cache, feed }) => {
      // Enough keys that every master holds some.
      const hashes = Array.from({ length: 30 }, () => keyHashOf(uniqueId('raw')));
      const slots = await Promise.all(hashes.map(async (h) => Number(await redis.cluster('KEYSLOT', sessionKey(h)))));
      expect(new Set(slots.map((slot) => redis.slots[slot]?.[0])).size).toBe(3);
      await Promise.all(hashes.map((h) => store.put(h, session({ alias: 'before' }))));
      expect((await Promise.all(hashes.map((h) => cache.get(h)))).map((s) => s?.alias)).toEqual(hashes.map(() => 'before'));
      await Promise.all(hashes.map((h) => store.put(h, session({ alias: 'after' }))));
      await eventually(async () => (await Promise.all(hashes.map((h) => cache.get(h)))).every((s) => s?.alias === 'after'), 10_000, 'every change reported');

      // One master's report connection killed: the change that falls before the next is still seen.
      await killReportConnection(redis.nodes('master')[0]!);
      await Promise.all(hashes.map((h) => store.put(h, session({ alias: 'unreported' }))));
      await eventually(async () => (await Promise.all(hashes.map((h) => cache.get(h)))).every((s) => s?.alias === 'unreported'), 10_000, 'the changes seen without reports');
      await eventually(() => feed.tracking, 10_000, 'tracking again');
      await Promise.all(hashes.map((h) => store.delete(h)));
      await eventually(async () => (await Promise.all(hashes.map((h) => cache.get(h)))).every((s) => s === null), 10_000, 'the deletes reported');
    });
  });
});

describe('Redis Cluster: each master reports a session change only to the gateways that read it there', () => {
  it('two gateways, each with sessions on every master, are each told of their own and not of the other\'s', async () => {
    const gateways = [clusterGateway(cluster.url), clusterGateway(cluster.url)];
    const admin = createRedisClient(cluster.url, {}) as Cluster;
    try {
      await eventually(() => gateways.every((g) => g.feed!.tracking), 10_000, 'both gateways track');
      const masters = admin.nodes('master');
      expect(masters).toHaveLength(3);
      // Two sessions per master for each gateway.
      const byMaster = new Map<string, string[]>(masters.map((m) => [nodeName(m), []]));
      for (let i = 0; i < 1_000 && [...byMaster.values()].some((hashes) => hashes.length < 4); i++) {
        const hash = keyHashOf(uniqueId('raw'));
        const hashes = byMaster.get(admin.slots[calculateSlot(sessionKey(hash))]![0]!)!;
        if (hashes.length < 4) hashes.push(hash);
      }
      const own = [0, 1].map((g) => [...byMaster.values()].flatMap((hashes) => hashes.slice(2 * g, 2 * g + 2)));
      expect(own.map((hashes) => hashes.length)).toEqual([6, 6]);
      const store = new RedisSessionStore(admin);
      await Promise.all([...own[0]!, ...own[1]!].map((h) => store.put(h, session({ alias: 'before' }))));

      const tableBefore = await Promise.all(masters.map(trackedKeys));
      for (const [g, gateway] of gateways.entries()) {
        expect((await Promise.all(own[g]!.map((h) => gateway.cache.get(h)))).map((s) => s?.alias)).toEqual(own[g]!.map(() => 'before'));
      }
      // Each master holds the four sessions read from it in its table, and nothing else: the limit scripts and writes are not tracked.
      expect((await Promise.all(masters.map(trackedKeys))).map((n, i) => n - tableBefore[i]!)).toEqual([4, 4, 4]);

      await Promise.all([...own[0]!, ...own[1]!].map((h) => store.put(h, session({ alias: 'after' }))));
      await eventually(() => gateways.every((g, i) => g.told.length >= own[i]!.length), 10_000, 'both gateways told');
      for (const [g, gateway] of gateways.entries()) {
        expect([...gateway.told].sort()).toEqual([...own[g]!].sort());
        // Told, each re-reads its own at once, whatever the minute-long tracked TTL.
        expect((await Promise.all(own[g]!.map((h) => gateway.cache.get(h)))).map((s) => s?.alias)).toEqual(own[g]!.map(() => 'after'));
      }
      await Promise.all([...own[0]!, ...own[1]!].map((h) => store.delete(h)));
    } finally {
      await Promise.all(gateways.map((g) => g.close()));
      admin.disconnect();
    }
  });
});

describe('Redis Cluster: a session whose slot moves to another master', () => {
  it('the master it left reports it gone; it is then read from the master it moved to, which reports its changes', async () => {
    const own = await startRedisCluster();
    const gateway = clusterGateway(own.url);
    const admin = createRedisClient(own.url, {}) as Cluster;
    try {
      await eventually(() => gateway.feed!.tracking, 10_000, 'tracking');
      const store = new RedisSessionStore(admin);
      const hash = keyHashOf(uniqueId('raw'));
      const key = sessionKey(hash);
      await store.put(hash, session({ alias: 'before' }));
      expect((await gateway.cache.get(hash))?.alias).toBe('before');

      const slot = calculateSlot(key);
      const masters = admin.nodes('master');
      const from = masters.find((m) => nodeName(m) === admin.slots[slot]![0])!;
      const to = masters.find((m) => m !== from)!;
      const fromId = String(await from.cluster('MYID'));
      const toId = String(await to.cluster('MYID'));
      await to.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
      await from.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
      await from.migrate(to.options.host!, to.options.port!, key, 0, 5_000);
      for (const m of masters) await m.call('CLUSTER', 'SETSLOT', slot, 'NODE', toId);

      // The move deleted the session on the master it left, which reports that.
      await eventually(() => gateway.told.includes(hash), 10_000, 'the move reported');
      // Read again (the gateway's slot map may still name the old master: its MOVED is followed, untracked).
      expect((await gateway.cache.get(hash))?.alias).toBe('before');
      await store.put(hash, session({ alias: 'moved' }));
      await eventually(async () => (await gateway.cache.get(hash))?.alias === 'moved', 10_000, 'the change on the new master seen');
      // Past the short TTL, the next read is tracked on the master the session moved to ...
      await sleep(50);
      expect((await gateway.cache.get(hash))?.alias).toBe('moved');
      expect(await trackedKeys(to)).toBeGreaterThanOrEqual(1);
      // ... which reports the next change.
      const toldBefore = gateway.told.length;
      await store.put(hash, session({ alias: 'reported' }));
      await eventually(() => gateway.told.slice(toldBefore).includes(hash), 10_000, 'the new master reports the change');
      expect((await gateway.cache.get(hash))?.alias).toBe('reported');
      expect(gateway.feed!.tracking).toBe(true);
    } finally {
      await gateway.close();
      admin.disconnect();
      await own.dispose();
    }
  });
});

describe('Redis Cluster with a master gone', () => {
  it('decisions follow the failure mode within redis_timeout_ms, nothing throws, errors are counted', async () => {
    const own = await startRedisCluster();
    try {
      const target = api(uniqueId('cl-down'), { api_limit: { rate: 100, per: 10 } });
      const gatewayIn = (mode: 'open' | 'closed') => {
        const settings = { enable_redis_rolling_limiter: true, redis_failure_mode: mode, redis_timeout_ms: 300 };
        return startGateway(config({ settings, apis: [target] }), own.url, { commandTimeoutMs: 300 });
      };
      const [closed, open] = [gatewayIn('closed'), gatewayIn('open')];
      await Promise.all([waitReady(closed.redis), waitReady(open.redis)]);
      const req = request(target, null);
      expect((await closed.engine.decide(req)).outcome).toBe('allowed');

      // Stop the master serving the API limiter's slot.
      const slot = Number(await closed.redis.cluster('KEYSLOT', limiterKey(`a:${target.api_id}`, 'log')));
      const owner = (closed.redis as Cluster).slots[slot]![0]!;
      await own.stopNode(Number(owner.split(':').at(-1)));
      const started = Date.now();
      const [whenClosed, whenOpen] = await Promise.all([burstOutcomes([closed], req, 5), burstOutcomes([open], req, 5)]);
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(whenClosed).toEqual({ store_unavailable: 5 });
      expect(whenOpen).toEqual({ allowed: 5 });
      for (const gateway of [closed, open]) {
        expect((await metricValues(gateway.metrics.registry, 'gw_redis_errors_total')).total).toBeGreaterThanOrEqual(5);
        expect(gateway.logs.join('')).toContain('rate-limit store unreachable');
      }
    } finally {
      await stopAllGateways();
      await own.dispose();
    }
  });
});

describe('Redis Cluster with a master gone: the log', () => {
  it('a gateway serving keys on every master logs the outage once, not at each call and each reconnection', async () => {
    const own = await startRedisCluster();
    const upstream = await startEchoUpstream();
    const client = createRedisClient(own.url, { lazyConnect: false }) as Cluster;
    const logs: string[] = [];
    let sidecar: RunningSidecar | undefined;
    try {
      const target = compiledApi(uniqueId('cl-log'), upstream.url, { keyless: false });
      const source = new HandSource(compiledConfig([target], { redis_failure_mode: 'open' }));
      sidecar = await startTestSidecar(sidecarOptions('default', own.url), { source, logger: collectingLogger(logs) });
      await waitReady(client);
      // Keys whose limits and sessions sit on every master: calls to the others succeed between the failures.
      const keys = await Promise.all(Array.from({ length: 12 }, () => storeSession(client, { rate: 1000, per: 1, access_rights: { [target.api_id]: { api_id: target.api_id } } })));
      const url = `${sidecar.proxyUrl}/${target.api_id}/`;
      for (const key of keys) expect((await call(url, { headers: { authorization: key } })).status).toBe(200);
      const before = logs.length;
      await own.stopNode(Number(client.nodes('master')[0]!.options.port));
      // 4 s of traffic, 25 requests a second.
      for (let i = 0; i < 100; i++) {
        await Promise.all([call(url, { headers: { authorization: keys[i % keys.length]! } }).catch(() => undefined), sleep(40)]);
      }
      const lines = logs.slice(before).map((line) => (JSON.parse(line) as { msg: string }).msg);
      const count = (msg: string): number => lines.filter((line) => line === msg).length;
      expect(count('rate-limit store unreachable')).toBeLessThanOrEqual(1);
      expect(count('rate-limit store reachable again')).toBe(0);
      // One a 5 s per connection gate: the Cluster client's, and the lost master's session feed.
      expect(count('redis unavailable'), lines.join('\n')).toBeLessThanOrEqual(4);
    } finally {
      await sidecar?.close();
      client.disconnect();
      await upstream.close();
      await own.dispose();
    }
  });
});

describe('Redis Cluster with a master gone: session reads', () => {
  it('a key whose session is on the lost master is answered within redis_timeout_ms, not after the client\'s retries', async () => {
    const own = await startRedisCluster();
    const redis = createRedisClient(own.url, sidecarRedisOptions(300)) as Cluster;
    redis.on('error', () => undefined);
    const { cache, changes } = reportedSessionCache(redis, { logger: quietLogger, readTimeoutMs: () => 300 });
    try {
      await waitReady(redis);
      // Hashes whose sessions sit on one master: the one that goes.
      const owner = redis.slots[calculateSlot(sessionKey('a'.repeat(64)))]![0]!;
      const onOwner = Array.from({ length: 400 }, (_, i) => i.toString(16).padStart(64, 'a')).filter((h) => redis.slots[calculateSlot(sessionKey(h))]![0] === owner).slice(0, 4);
      expect(onOwner).toHaveLength(4);
      // Read while the master is up (and cached as unknown, so not read again below).
      expect(await cache.get(onOwner[0]!)).toBeNull();
      await own.stopNode(Number(owner.split(':').at(-1)));
      for (const hash of onOwner.slice(1)) {
        const started = performance.now();
        await expect(Promise.resolve(cache.get(hash))).rejects.toThrow();
        // The Cluster client alone, sending it again on CLUSTERDOWN and redirections, held it 1 to 2 s.
        expect(performance.now() - started).toBeLessThan(600);
      }
    } finally {
      await changes.close();
      redis.disconnect();
      await own.dispose();
    }
  });

  it('failing open, a key whose session is on a master still up keeps its last session while the Cluster answers CLUSTERDOWN', async () => {
    const own = await startRedisCluster();
    const redis = createRedisClient(own.url, sidecarRedisOptions(300)) as Cluster;
    redis.on('error', () => undefined);
    const { cache, changes } = reportedSessionCache(redis, { logger: quietLogger, readTimeoutMs: () => 300, ttlMs: 20, trackedTtlMs: 20, servesStale: () => true });
    const store = new RedisSessionStore(redis);
    try {
      await waitReady(redis);
      const hashes = Array.from({ length: 400 }, (_, i) => i.toString(16).padStart(64, 'b'));
      const masterOf = (hash: string): string => redis.slots[calculateSlot(sessionKey(hash))]![0]!;
      const lost = masterOf(hashes[0]!);
      const kept = hashes.find((hash) => masterOf(hash) !== lost)!;
      await store.put(kept, session({ alias: 'kept' }));
      await eventually(() => changes.tracking, 10_000, 'tracking on every master');
      expect((await cache.get(kept))?.alias).toBe('kept');

      await own.stopNode(Number(lost.split(':').at(-1)));
      // Once the others mark it failed, the master holding `kept` refuses every read with CLUSTERDOWN.
      const keptMaster = redis.nodes('master').find((node) => nodeName(node) === masterOf(kept))!;
      const refused = async (): Promise<boolean> => (await keptMaster.get(sessionKey(kept)).catch((err: Error) => err.message))?.startsWith('CLUSTERDOWN') === true;
      await eventually(refused, 15_000, 'CLUSTERDOWN from the master still up');
      // Read again (its entry lives 20 ms) and refused. Nothing reported a change to it: the
      // outage is answered from the session last read, at once rather than after the cluster
      // client's retries of the read on CLUSTERDOWN.
      const started = performance.now();
      expect((await cache.get(kept))?.alias).toBe('kept');
      expect(performance.now() - started).toBeLessThan(150);
    } finally {
      await changes.close();
      redis.disconnect();
      await own.dispose();
    }
  });
});

describe('Redis Cluster: a refused request consumes nothing at the levels that admitted it', () => {
  it.each([
    ['sliding log', { enable_redis_rolling_limiter: true }, { api: 5, greedy: 5, polite: 2 }],
    ['sentinel', { enable_sentinel_rate_limiter: true }, { api: 5, greedy: 5, polite: 2 }],
    // A fixed window counts only what it admitted.
    ['fixed window', { enable_fixed_window_rate_limiter: true }, { api: 4, greedy: 2, polite: 2 }],
  ])('%s: undone in the other slots, so the result and the state match a single server', async (name, algorithm, held) => {
    const settings = { ...algorithm, redis_failure_mode: 'closed' as const, redis_timeout_ms: 3000 };
    const target = api(uniqueId('cl-refund'), { api_limit: { rate: 4, per: 4 } });
    const gateway = startGateway(config({ settings, apis: [target] }), cluster.url);
    await waitReady(gateway.redis);
    const greedy = { session: session({ rate: 2, per: 4 }), raw: uniqueId('greedy') };
    const polite = { session: session({ rate: 100, per: 4 }), raw: uniqueId('polite') };
    if (name === 'fixed window') await alignTo(4000);
    const outcomes = async (caller: typeof greedy, n: number): Promise<string[]> => {
      const out: string[] = [];
      for (let i = 0; i < n; i++) out.push((await gateway.engine.decide(request(target, caller))).outcome);
      return out;
    };
    expect(await outcomes(greedy, 5)).toEqual(['allowed', 'allowed', 'key_rate_limited', 'key_rate_limited', 'key_rate_limited']);
    // The polite key's third request: the API refuses it; its key level, run at the same
    // time in another slot, admitted it and is given it back.
    expect(await outcomes(polite, 3)).toEqual(['allowed', 'allowed', 'api_rate_limited']);
    const count = async (limiterId: string): Promise<number> => {
      if (name !== 'fixed window') return gateway.redis.zcard(limiterKey(limiterId, 'log'));
      const slot = Number(await gateway.redis.cluster('KEYSLOT', limiterKey(limiterId, 'fw')));
      const node = (gateway.redis as Cluster).nodes('master').find((n) => (gateway.redis as Cluster).slots[slot]![0] === `${n.options.host}:${n.options.port}`)!;
      const [counter, ...more] = await node.keys(`${limiterKey(limiterId, 'fw')}:*`);
      expect(more).toEqual([]);
      return Number(await node.get(counter!));
    };
    const keyLimiter = (raw: string): string => `k:${keyHashOf(raw)}:session`;
    expect({ api: await count(`a:${target.api_id}`), greedy: await count(keyLimiter(greedy.raw)), polite: await count(keyLimiter(polite.raw)) }).toEqual(held);
    // The effective-limits read peeks each limiter in its own slot and sees the same state.
    const explained = await gateway.engine.explain(request(target, polite));
    expect(explained.limits.map((l) => [l.scope, l.held?.count, l.held?.remaining])).toEqual([
      ['api', held.api, 0],
      ['key_global', held.polite, 100 - held.polite],
    ]);
    expect(explained.refusedBy).toBe('api');
  });
});
