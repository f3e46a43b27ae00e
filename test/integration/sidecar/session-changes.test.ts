import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import { RedisSessionStore } from '../../../common/session-store.ts';
import { keyHash } from '../../../crds/key-hash.ts';
import { sessionSchema } from '../../../crds/session.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { SESSION_TTL_MS } from '../../../sidecar/auth/session-cache.ts';
import { REFUSED_SETUP_RETRY_MS, reportedSessionCache, TrackedSessionReads } from '../../../sidecar/auth/session-changes.ts';
import { createNamespace, startRedis, type RedisHandle } from '../../harness/index.ts';
import { metricValues } from '../limits/helpers.ts';
import { gatewayTold, killReportConnection, trackedKeys } from '../../support/session-changes.ts';
import { latencyProxy } from '../../support/latency-proxy.ts';
import { call, compiledApi, deployApi, eventually, quietLogger, servesApi, sidecarOptions, startTestSidecar, storeSession, uniqueId } from './helpers.ts';
import { Redis as RedisClient } from 'ioredis';
import { pino } from 'pino';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The sidecar's gw_session_changes_tracked: 1 while Redis reports every session change to it. */
const tracked = async (sidecar: RunningSidecar): Promise<number | undefined> => Object.values(await metricValues(sidecar.metrics.registry, 'gw_session_changes_tracked'))[0];

/**
 * Server-assisted caching of sessions (docs/architecture.md#sessions), on a Redis of its own
 * so the connections it kills and the GETs it counts are this file's alone.
 */
describe('sessions stay cached until Redis reports their change', () => {
  let upstream: EchoUpstream;
  let redis: RedisHandle;
  let client: Redis;
  let monitor: Redis;
  let sidecar: RunningSidecar;
  let namespace: string;
  let apiId: string;
  /** GETs and SETs of each session key, as Redis saw them. */
  const reads = new Map<string, number>();
  const writes = new Map<string, number>();
  const readsOf = (rawKey: string): number => reads.get(sessionKey(keyHash(rawKey))) ?? 0;
  const writesOf = (rawKey: string): number => writes.get(sessionKey(keyHash(rawKey))) ?? 0;
  const callWith = (rawKey: string) => call(`${sidecar.proxyUrl}/${apiId}/`, { headers: { authorization: rawKey } });
  const grant = (): Record<string, unknown> => ({ access_rights: { [apiId]: { api_id: apiId, api_name: apiId } } });

  beforeAll(async () => {
    namespace = await createNamespace('sc-session-changes');
    upstream = await startEchoUpstream();
    redis = await startRedis();
    client = new RedisClient(redis.url, { maxRetriesPerRequest: 1 });
    monitor = await client.monitor();
    monitor.on('monitor', (_time: string, args: string[]) => {
      const counted = { get: reads, set: writes }[args[0]?.toLowerCase() ?? ''];
      if (counted !== undefined && args[1] !== undefined) counted.set(args[1], (counted.get(args[1]) ?? 0) + 1);
    });
    sidecar = await startTestSidecar(sidecarOptions(namespace, redis.url));
    apiId = uniqueId('api');
    await deployApi(sidecar, namespace, compiledApi(apiId, upstream.url, { keyless: false }));
    await eventually(async () => (await tracked(sidecar)) === 1, 10_000, 'session changes tracked');
  });

  afterAll(async () => {
    await sidecar?.close();
    monitor?.disconnect();
    client?.disconnect();
    await redis?.stop();
    await upstream?.close();
  });

  it('reads an unchanged session once, however long past the short TTL, and honours a change at once', async () => {
    const rawKey = await storeSession(client, grant());
    expect((await callWith(rawKey)).status).toBe(200);
    for (let i = 0; i < 4; i++) {
      await sleep(SESSION_TTL_MS);
      expect((await callWith(rawKey)).status).toBe(200);
    }
    // Two GETs, both at the first request: a key not seen before is read untracked, then again
    // tracked once its session is found (sidecar/auth/session-changes.ts).
    await eventually(() => readsOf(rawKey) >= 2, 2_000, 'the GETs seen by MONITOR');
    expect(readsOf(rawKey)).toBe(2);

    // Deactivated, as the operator writes it: refused as soon as the report arrives, long before a TTL could have expired.
    await new RedisSessionStore(client).put(keyHash(rawKey), sessionSchema.parse({ ...grant(), is_inactive: true }));
    await eventually(async () => (await callWith(rawKey)).status === 403, 2_000, 'the deactivated key refused');
    // Deleted: unknown, and refused the same way.
    await client.del(sessionKey(keyHash(rawKey)));
    await new RedisSessionStore(client).put(keyHash(rawKey), sessionSchema.parse(grant()));
    await eventually(async () => (await callWith(rawKey)).status === 200, 2_000, 'the key active again');
    await client.del(sessionKey(keyHash(rawKey)));
    await eventually(async () => (await callWith(rawKey)).status === 403, 2_000, 'the deleted key refused');
    expect((await callWith(rawKey)).json()).toEqual({ error: 'Access to this API has been disallowed' });
  });

  it('forgets every session when Redis is flushed', async () => {
    const rawKey = await storeSession(client, grant());
    expect((await callWith(rawKey)).status).toBe(200);
    await client.flushall();
    await eventually(async () => (await callWith(rawKey)).status === 403, 2_000, 'the flushed key refused');
    expect(await tracked(sidecar)).toBe(1);
  });

  // Either connection: the one whose reads Redis tracks, or the one the reports go to.
  it.each(['tracked', 'subscribed'] as const)('reads every session again once reports may have been lost (the %s connection killed), and tracks again on the next connection', async (which) => {
    const rawKey = await storeSession(client, grant());
    expect((await callWith(rawKey)).status).toBe(200);
    // The change falls between the kill and the next connection: nobody reports it.
    await killReportConnection(client, which);
    await new RedisSessionStore(client).put(keyHash(rawKey), sessionSchema.parse({ ...grant(), is_inactive: true }));
    await eventually(async () => (await callWith(rawKey)).status === 403, 2_000, 'the change seen without a report');
    await eventually(async () => (await tracked(sidecar)) === 1, 10_000, 'tracking again');

    // Tracking again: a change is reported again.
    await new RedisSessionStore(client).put(keyHash(rawKey), sessionSchema.parse(grant()));
    await eventually(async () => (await callWith(rawKey)).status === 200, 2_000, 'the key active again');
    const before = readsOf(rawKey);
    await sleep(3 * SESSION_TTL_MS);
    expect((await callWith(rawKey)).status).toBe(200);
    expect(readsOf(rawKey)).toBe(before);
  });

  it('keeps as many sessions as --session-cache-size: past it, keys taken in turn are read at each request', async () => {
    const small = await startTestSidecar({ ...sidecarOptions(namespace, redis.url), sessionCacheSize: 2 });
    try {
      await eventually(servesApi(small, apiId), 10_000, 'the API served');
      await eventually(async () => (await tracked(small)) === 1, 10_000, 'session changes tracked');
      const inTurn = async (target: RunningSidecar, rawKeys: string[]): Promise<number[]> => {
        for (let round = 0; round < 3; round++) {
          for (const rawKey of rawKeys) expect((await call(`${target.proxyUrl}/${apiId}/`, { headers: { authorization: rawKey } })).status).toBe(200);
        }
        await sleep(200); // MONITOR's last lines
        return rawKeys.map(readsOf);
      };
      // Three keys through two places: each pushes out the one that comes next, and comes back
      // as a key not seen before (read untracked, then tracked: two GETs).
      expect(await inTurn(small, await Promise.all([1, 2, 3].map(() => storeSession(client, grant()))))).toEqual([6, 6, 6]);
      // The same rotation through the default 10,000: each key read once, as a key not seen before.
      expect(await inTurn(sidecar, await Promise.all([1, 2, 3].map(() => storeSession(client, grant()))))).toEqual([2, 2, 2]);
    } finally {
      await small.close();
    }
  });

  it('is told only of the sessions its gateway read: Redis tracks those keys, not the whole prefix', async () => {
    const [a, b] = [gatewayTold(redis.url, 'tracked reads', quietLogger), gatewayTold(redis.url, 'tracked reads', quietLogger)];
    try {
      await eventually(() => a.feed!.tracking && b.feed!.tracking, 10_000, 'both tracking');
      const trackedBefore = await trackedKeys(client);
      const [x, y] = await Promise.all([storeSession(client, grant()), storeSession(client, grant())]).then((keys) => keys.map(keyHash));
      expect([await a.cache.get(x!), await b.cache.get(y!)]).not.toContain(null);
      expect(await trackedKeys(client)).toBe(trackedBefore + 2);

      const store = new RedisSessionStore(client);
      await store.put(x!, sessionSchema.parse({ ...grant(), is_inactive: true }));
      await store.put(y!, sessionSchema.parse({ ...grant(), is_inactive: true }));
      // Redis reports in the order of the writes: once each has heard of its own key, it would have heard of the other's.
      await eventually(() => a.told.includes(x!) && b.told.includes(y!), 2_000, 'each told of the session it read');
      expect(a.told).not.toContain(y);
      expect(b.told).not.toContain(x);
      expect((await a.cache.get(x!))?.is_inactive).toBe(true);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('tracks only the sessions found: a flood of made-up keys leaves nothing in Redis\'s tracking table, and each stays refused', async () => {
    const trackedBefore = await trackedKeys(client);
    const madeUp = Array.from({ length: 200 }, (_, i) => `made-up-${uniqueId('key')}-${i}`);
    for (const rawKey of madeUp) expect((await callWith(rawKey)).status).toBe(403);
    expect(await trackedKeys(client)).toBe(trackedBefore);
    // A made-up key is remembered as unknown for the short TTL only, untracked: once its session
    // is made, it is let in within that TTL, with no report to wait for.
    const later = madeUp[0]!;
    await new RedisSessionStore(client).put(keyHash(later), sessionSchema.parse(grant()));
    await eventually(async () => (await callWith(later)).status === 200, 2 * SESSION_TTL_MS + 1_000, 'the key let in once made');
    // Found, it is tracked as any session: a change is reported and honoured at once.
    expect(await trackedKeys(client)).toBe(trackedBefore + 1);
    await new RedisSessionStore(client).put(keyHash(later), sessionSchema.parse({ ...grant(), is_inactive: true }));
    await eventually(async () => (await callWith(later)).status === 403, 2_000, 'the deactivated key refused');
  });

  it('a tracked read that times out is not read again on the main connection: a stalled Redis costs a session one timeout', async () => {
    const own = await startRedis();
    const admin = new RedisClient(own.url);
    const base = new RedisClient(own.url, { commandTimeout: 300, maxRetriesPerRequest: 1 });
    const reads = new TrackedSessionReads(base, quietLogger);
    try {
      await eventually(() => base.status === 'ready' && reads.reader.status === 'ready', 5_000, 'connected');
      reads.tracked = true;
      expect(await reads.getJson('0'.repeat(64))).toBeNull();
      await admin.client('PAUSE', '1500', 'ALL');
      const started = performance.now();
      await expect(reads.getJson('0'.repeat(64))).rejects.toThrow('Command timed out');
      const waited = performance.now() - started;
      expect(waited).toBeGreaterThanOrEqual(290);
      // Read again on the main connection, it waited a second 300 ms.
      expect(waited).toBeLessThan(500);
    } finally {
      reads.reader.disconnect();
      base.disconnect();
      admin.disconnect();
      await own.stop();
    }
  });

  it('tries again when turning reports on fails for a while (commands timing out on a busy Redis), rather than giving up', async () => {
    const own = await startRedis();
    const admin = new RedisClient(own.url);
    // 'ready' at connect, so the setup's first commands go out while Redis holds every command back.
    const base = new RedisClient(own.url, { commandTimeout: 100, enableReadyCheck: false, maxRetriesPerRequest: 1 });
    try {
      await eventually(() => base.status === 'ready', 5_000, 'connected');
      await admin.client('PAUSE', '1000', 'ALL');
      const { cache, changes } = reportedSessionCache(base, { logger: quietLogger, ttlMs: 20, trackedTtlMs: 60_000 });
      try {
        await eventually(() => changes.tracking, 10_000, 'tracking once Redis answers again');
        const rawKey = await storeSession(admin, grant());
        expect((await cache.get(keyHash(rawKey)))?.is_inactive).toBe(false);
        await new RedisSessionStore(admin).put(keyHash(rawKey), sessionSchema.parse({ ...grant(), is_inactive: true }));
        await eventually(async () => (await cache.get(keyHash(rawKey)))?.is_inactive === true, 2_000, 'the change reported');
      } finally {
        await changes.close();
      }
    } finally {
      base.disconnect();
      admin.disconnect();
      await own.stop();
    }
  });

  it('a folder reload writes only the sessions whose Key changed, so the others stay cached', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gw-session-folder-'));
    const [kept, edited] = [randomBytes(16).toString('hex'), randomBytes(16).toString('hex')];
    const keyYaml = (name: string, rawKey: string, rate: number): string =>
      `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: ${name} }\nspec: { key_hash: ${keyHash(rawKey)}, rate: ${rate}, per: 60, access_rights: { folder-api: { api_id: folder-api, api_name: folder-api } } }\n`;
    const write = (editedRate: number) =>
      writeFile(join(dir, 'all.yaml'), [
        `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: folder-api }\nspec: { api_id: folder-api, name: folder-api, use_keyless: false, proxy: { listen_path: /folder-api/, target_url: '${upstream.url}', strip_listen_path: true } }\n`,
        keyYaml('kept', kept, 100),
        keyYaml('edited', edited, editedRate),
      ].join('---\n'));
    await write(100);
    const folder = await startTestSidecar({ ...sidecarOptions(namespace, redis.url), configDir: dir });
    try {
      await eventually(async () => (await tracked(folder)) === 1, 10_000, 'session changes tracked');
      const callFolder = (rawKey: string) => call(`${folder.proxyUrl}/folder-api/`, { headers: { authorization: rawKey } });
      for (const rawKey of [kept, edited]) expect((await callFolder(rawKey)).status).toBe(200);
      await sleep(200); // MONITOR's last lines
      expect([writesOf(kept), writesOf(edited)]).toEqual([1, 1]);
      const readsBefore = readsOf(kept);

      await write(50);
      await folder.runtime.reload();
      expect((await callFolder(kept)).status).toBe(200);
      await sleep(200);
      // The edited Key's session is written again; the kept one is read by the reload only, and its request found it cached.
      expect([writesOf(kept), writesOf(edited)]).toEqual([1, 2]);
      expect(readsOf(kept)).toBe(readsBefore + 1);
    } finally {
      await folder.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a folder reload leaves settled Keys alone, and still puts right a session changed or deleted in Redis behind its back', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gw-session-folder-'));
    const newRawKey = (): string => randomBytes(16).toString('hex');
    const [changed, deleted, untouched, added] = [newRawKey(), newRawKey(), newRawKey(), newRawKey()];
    const keyFile = (name: string, rawKey: string): Promise<void> =>
      writeFile(
        join(dir, `${name}.yaml`),
        `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: ${name} }\nspec: { key_hash: ${keyHash(rawKey)}, rate: 100, per: 60, quota_max: 50, access_rights: { settled-api: { api_id: settled-api, api_name: settled-api } } }\n`,
      );
    await writeFile(
      join(dir, 'api.yaml'),
      `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: settled-api }\nspec: { api_id: settled-api, name: settled-api, use_keyless: false, proxy: { listen_path: /settled-api/, target_url: '${upstream.url}', strip_listen_path: true } }\n`,
    );
    await Promise.all([keyFile('changed', changed), keyFile('deleted', deleted), keyFile('untouched', untouched)]);
    const folder = await startTestSidecar({ ...sidecarOptions(namespace, redis.url), configDir: dir });
    const stored = async (rawKey: string) => {
      const json = await client.get(sessionKey(keyHash(rawKey)));
      return json === null ? null : sessionSchema.parse(JSON.parse(json));
    };
    try {
      // A reload with nothing changed: every Key is settled, none written again.
      await folder.runtime.reload();
      await sleep(200); // MONITOR's last lines
      expect([changed, deleted, untouched].map(writesOf)).toEqual([1, 1, 1]);
      // Behind the gateway's back: a spec field and a run-time field of one session moved, another session deleted.
      await client.set(sessionKey(keyHash(changed)), JSON.stringify({ ...(await stored(changed)), rate: 5, quota_remaining: 7 }));
      await client.del(sessionKey(keyHash(deleted)));

      await keyFile('added', added);
      await folder.runtime.reload();
      await sleep(200);
      // The changed session has its Key's rate again and keeps its run-time field; the deleted one is back; the untouched one was not written.
      expect(await stored(changed)).toMatchObject({ rate: 100, quota_remaining: 7 });
      expect(await stored(deleted)).toMatchObject({ rate: 100, quota_remaining: 50 });
      expect([changed, deleted, untouched, added].map(writesOf)).toEqual([3, 2, 1, 1]);
      const callFolder = (rawKey: string) => call(`${folder.proxyUrl}/settled-api/`, { headers: { authorization: rawKey } });
      expect((await Promise.all([changed, deleted, untouched, added].map(callFolder))).map((res) => res.status)).toEqual([200, 200, 200, 200]);
    } finally {
      await folder.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a Redis flushed behind the gateway: the folder\'s Keys keep working and their sessions are written back; a Key removed is refused', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gw-session-folder-'));
    const newRawKey = (): string => randomBytes(16).toString('hex');
    const [kept, removed, stranger] = [newRawKey(), newRawKey(), newRawKey()];
    const keyDoc = (name: string, rawKey: string): string =>
      `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: ${name} }\nspec: { key_hash: ${keyHash(rawKey)}, rate: 100, per: 60, access_rights: { flushed-api: { api_id: flushed-api, api_name: flushed-api } } }\n`;
    await writeFile(
      join(dir, 'api.yaml'),
      `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: flushed-api }\nspec: { api_id: flushed-api, name: flushed-api, use_keyless: false, proxy: { listen_path: /flushed-api/, target_url: '${upstream.url}', strip_listen_path: true } }\n`,
    );
    await writeFile(join(dir, 'keys.yaml'), [keyDoc('kept', kept), keyDoc('removed', removed)].join('---\n'));
    const folder = await startTestSidecar({ ...sidecarOptions(namespace, redis.url), configDir: dir });
    const callFolder = async (rawKey: string): Promise<number> => (await call(`${folder.proxyUrl}/flushed-api/`, { headers: { authorization: rawKey } })).status;
    try {
      await eventually(async () => (await tracked(folder)) === 1, 10_000, 'session changes tracked');
      expect(await Promise.all([kept, removed, stranger].map(callFolder))).toEqual([200, 200, 403]);
      await client.flushall();
      // The flush is reported, and the keys read again find no session: answered from the folder.
      await sleep(100);
      expect(await Promise.all([kept, removed, stranger].map(callFolder))).toEqual([200, 200, 403]);
      await eventually(async () => (await client.exists(sessionKey(keyHash(kept)), sessionKey(keyHash(removed)))) === 2, 5_000, 'the sessions written back');

      await writeFile(join(dir, 'keys.yaml'), keyDoc('kept', kept));
      await folder.runtime.reload();
      expect(await client.exists(sessionKey(keyHash(removed)))).toBe(0);
      await eventually(async () => (await callFolder(removed)) === 403, 2_000, 'the removed Key refused');
      expect(await callFolder(kept)).toBe(200);
    } finally {
      await folder.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a gateway started while Redis is away serves the folder\'s Keys as soon as Redis first answers, not at its retry\'s next turn', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gw-session-folder-'));
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(
      join(dir, 'all.yaml'),
      `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: late-redis }\nspec: { api_id: late-redis, name: late-redis, use_keyless: false, proxy: { listen_path: /late-redis/, target_url: '${upstream.url}', strip_listen_path: true } }\n---\n` +
        `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: late }\nspec: { key_hash: ${keyHash(rawKey)}, rate: 100, per: 60, access_rights: { late-redis: { api_id: late-redis, api_name: late-redis } } }\n`,
    );
    const own = await startRedis();
    await own.stop();
    const folder = await startTestSidecar({ ...sidecarOptions(namespace, own.url), configDir: dir });
    const callFolder = async (): Promise<number> => (await call(`${folder.proxyUrl}/late-redis/`, { headers: { authorization: rawKey } })).status;
    try {
      // Failing to store the sessions, the folder is loaded again after 1, 2, 4 and 8 s: the next after 15 s.
      await sleep(8_000);
      expect(await callFolder()).toBe(503);
      await own.start();
      const started = Date.now();
      await eventually(async () => (await callFolder()) === 200, 4_000, 'the Key served');
      expect(Date.now() - started).toBeLessThan(4_000);
    } finally {
      await folder.close();
      await own.dispose();
      await rm(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it('a folder of Keys is loaded in a few round trips to Redis, not one per Key', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gw-session-folder-'));
    const rawKeys = Array.from({ length: 300 }, () => randomBytes(16).toString('hex'));
    await writeFile(join(dir, 'all.yaml'), [
      `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: many-keys }\nspec: { api_id: many-keys, name: many-keys, use_keyless: false, proxy: { listen_path: /many-keys/, target_url: '${upstream.url}', strip_listen_path: true } }\n`,
      ...rawKeys.map((rawKey, i) => `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: key-${i} }\nspec: { key_hash: ${keyHash(rawKey)}, rate: 100, per: 60, access_rights: { many-keys: { api_id: many-keys, api_name: many-keys } } }\n`),
    ].join('---\n'));
    const slowLink = await latencyProxy(redis.url);
    const folder = await startTestSidecar({ ...sidecarOptions(namespace, slowLink.url), configDir: dir });
    try {
      await eventually(() => rawKeys.every((rawKey) => writesOf(rawKey) === 1), 5_000, 'each session written once at the start');
      // From now on every byte to Redis arrives 20 ms late: a reload that read the 300 sessions one after another would take 6 s.
      slowLink.delayMs = 20;
      const started = performance.now();
      await folder.runtime.reload();
      expect(performance.now() - started).toBeLessThan(2_000);
      const callFolder = (rawKey: string) => call(`${folder.proxyUrl}/many-keys/`, { headers: { authorization: rawKey } });
      expect((await Promise.all([rawKeys[0]!, rawKeys[299]!].map(callFolder))).map((res) => res.status)).toEqual([200, 200]);
      await sleep(200); // MONITOR's last lines
      // Nothing changed, so nothing was written again.
      expect(rawKeys.map(writesOf)).toEqual(rawKeys.map(() => 1));
    } finally {
      await folder.close();
      await slowLink.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  // An ACL user that may do everything the gateway does but run CLIENT, or but CLIENT CACHING (a
  // user made from README.md's list before tracking was opt-in): no tracking, and no harm; once
  // the ACL allows it, tracking starts without a restart.
  it.each([
    ['no CLIENT at all', 'reader', '-client', '+client'],
    ['no CLIENT CACHING', 'no-caching', '-client|caching', '+client|caching'],
  ])('keeps the short TTL, and says why, where Redis refuses to report changes (%s), until the ACL allows it', async (_name, user, denied, allowed) => {
    await client.call('ACL', 'SETUSER', user, 'on', '>reader-password', '~*', '&*', '+@all', denied);
    const url = redis.url.replace('redis://', `redis://${user}:reader-password@`);
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const restricted = await startTestSidecar(sidecarOptions(namespace, url), { logger });
    try {
      await eventually(() => lines.some((line) => line.includes('Redis does not report session changes')), 10_000, 'the warning');
      expect(await tracked(restricted)).toBe(0);
      await eventually(servesApi(restricted, apiId), 10_000, 'the API served');
      const rawKey = await storeSession(client, grant());
      const callRestricted = () => call(`${restricted.proxyUrl}/${apiId}/`, { headers: { authorization: rawKey } });
      expect((await callRestricted()).status).toBe(200);
      await sleep(2 * SESSION_TTL_MS);
      expect((await callRestricted()).status).toBe(200);
      // Read again once the short TTL is over.
      await eventually(() => readsOf(rawKey) >= 2, 2_000, 'the second GET seen by MONITOR');
      expect(lines.join('')).not.toContain(rawKey);

      // The ACL fixed: the gateway asks again (every REFUSED_SETUP_RETRY_MS), and its sessions
      // stay cached from then on.
      await client.call('ACL', 'SETUSER', user, allowed);
      await eventually(async () => (await tracked(restricted)) === 1, REFUSED_SETUP_RETRY_MS + 5_000, 'tracking on once allowed');
      expect(lines.filter((line) => line.includes('Redis does not report session changes'))).toHaveLength(1);
      expect((await callRestricted()).status).toBe(200);
      const readsTracked = readsOf(rawKey);
      await sleep(2 * SESSION_TTL_MS);
      expect((await callRestricted()).status).toBe(200);
      await sleep(200); // MONITOR's last lines
      expect(readsOf(rawKey)).toBeLessThanOrEqual(readsTracked + 2);
      const settled = readsOf(rawKey);
      await sleep(2 * SESSION_TTL_MS);
      expect((await callRestricted()).status).toBe(200);
      await sleep(200);
      expect(readsOf(rawKey)).toBe(settled);
    } finally {
      await restricted.close();
    }
  }, REFUSED_SETUP_RETRY_MS + 30_000);
});
