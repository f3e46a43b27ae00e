import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limiterKey, sessionKey } from '../../../common/redis-keys.ts';
import { keyHash } from '../../../crds/key-hash.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace, startRedis, type RedisHandle } from '../../harness/index.ts';
import {
  call,
  compiledApi,
  compiledConfig,
  deployApi,
  eventually,
  newRedis,
  servesApi,
  sidecarOptions,
  startTestSidecar,
  storeSession,
  uniqueId,
  writeConfigMap,
} from './helpers.ts';
import { Redis as RedisClient } from 'ioredis';
import { keylessApiYaml } from '../../support/api-yaml.ts';
import { latencyProxy } from '../../support/latency-proxy.ts';

describe('Redis faults with redis_failure_mode: closed', () => {
  let upstream: EchoUpstream;
  let redis: RedisHandle;
  let client: Redis;
  let sidecar: RunningSidecar;
  let namespace: string;

  beforeAll(async () => {
    namespace = await createNamespace('sc-faults');
    upstream = await startEchoUpstream();
    redis = await startRedis();
    client = new RedisClient(redis.url, { maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    sidecar = await startTestSidecar(sidecarOptions(namespace, redis.url), {
      env: { GW_REDIS_FAILURE_MODE: 'closed', GW_ENABLE_REDIS_ROLLING_LIMITER: 'true', GW_REDIS_TIMEOUT_MS: '200' },
    });
  });

  afterAll(async () => {
    await sidecar?.close();
    client?.disconnect();
    await redis?.stop();
    await upstream?.close();
  });

  it('answers 503 JSON while Redis is down, never crashes, and recovers; a gateway failing open stays ready', async () => {
    const failingOpen = await startTestSidecar(sidecarOptions(namespace, redis.url), { env: { GW_REDIS_FAILURE_MODE: 'open', GW_REDIS_TIMEOUT_MS: '200' } });
    const keyless = compiledApi(uniqueId('api'), upstream.url, { api_limit: { rate: 100, per: 60 } });
    const keyed = compiledApi(uniqueId('api'), upstream.url, { keyless: false });
    await writeConfigMap(namespace, keyless.api_id, JSON.stringify(compiledConfig([keyless])));
    await writeConfigMap(namespace, keyed.api_id, JSON.stringify(compiledConfig([keyed])));
    await eventually(() => servesApi(sidecar, keyless.api_id)() && servesApi(sidecar, keyed.api_id)());
    const key = await storeSession(client, { access_rights: { [keyed.api_id]: { api_id: keyed.api_id } } });
    const revoked = await storeSession(client, { access_rights: { [keyed.api_id]: { api_id: keyed.api_id } } });
    expect((await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status).toBe(200);
    await eventually(() => servesApi(failingOpen, keyed.api_id)());
    for (const gateway of [sidecar, failingOpen]) expect((await call(`${gateway.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: key } })).status).toBe(200);
    expect((await call(`${failingOpen.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: revoked } })).status).toBe(200);
    // Revoked (its Key deleted) and not sent again before the outage: Redis reports the deletion
    // to the gateway that read it within milliseconds; a second is ample.
    await client.del(sessionKey(keyHash(revoked)));
    await new Promise((resolve) => setTimeout(resolve, 1000));

    await redis.stop();
    // A key read before Redis went away: failing open it is served from the session last read; failing closed, refused.
    await eventually(async () => (await call(`${sidecar.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: key } })).status === 503, 10_000, 'closed refuses the key');
    for (let i = 0; i < 3; i += 1) expect((await call(`${failingOpen.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: key } })).status).toBe(200);
    expect((await call(`${failingOpen.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: `${key}-other` } })).status).toBe(503);
    // A key whose session Redis reported deleted is not served from the read before it.
    expect((await call(`${failingOpen.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: revoked } })).status).toBe(503);
    const limited = await call(`${sidecar.proxyUrl}/${keyless.api_id}/`);
    expect(limited.status).toBe(503);
    expect(limited.json()).toEqual({ error: 'Rate limit store unavailable' });
    // A key not seen before cannot be checked without the session store.
    const unknown = await call(`${sidecar.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: `${key}-other` } });
    expect(unknown.status).toBe(503);
    expect(unknown.json()).toEqual({ error: 'Session store unavailable' });
    expect((await call(`${sidecar.healthUrl}/readyz`)).status).toBe(503);
    expect((await call(`${sidecar.healthUrl}/healthz`)).status).toBe(200);
    // Failing open, the gateway serves on, so it stays in its Service; Redis shows as a problem.
    await eventually(async () => JSON.stringify((await call(`${failingOpen.healthUrl}/readyz`)).json()).includes('redis_failure_mode open'), 10_000, 'Redis reported');
    const openReady = await call(`${failingOpen.healthUrl}/readyz`);
    expect(openReady.status).toBe(200);
    expect((openReady.json() as { problems: { subject: string }[] }).problems.map((p) => p.subject)).toContain('Redis');
    await failingOpen.close();

    await redis.start();
    await eventually(async () => (await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status === 200, 20_000, 'recovery');
    // The restarted Redis is empty (no persistence): the session is written again.
    const again = await storeSession(client, { access_rights: { [keyed.api_id]: { api_id: keyed.api_id } } });
    expect((await call(`${sidecar.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: again } })).status).toBe(200);
  });

  it('answers a key it has not seen at once while Redis is gone, not after redis_timeout_ms', async () => {
    const patient = await startTestSidecar(sidecarOptions(namespace, redis.url), { env: { GW_REDIS_FAILURE_MODE: 'open', GW_REDIS_TIMEOUT_MS: '5000' } });
    try {
      const keyed = compiledApi(uniqueId('api'), upstream.url, { keyless: false });
      await writeConfigMap(namespace, keyed.api_id, JSON.stringify(compiledConfig([keyed])));
      await eventually(() => servesApi(patient, keyed.api_id)());
      const key = await storeSession(client, { access_rights: { [keyed.api_id]: { api_id: keyed.api_id } } });
      expect((await call(`${patient.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: key } })).status).toBe(200);

      await redis.stop();
      await eventually(async () => JSON.stringify((await call(`${patient.healthUrl}/readyz`)).json()).includes('redis_failure_mode open'), 10_000, 'Redis reported');
      // Once the client tries to reconnect every second (common/redis-url.ts reconnectBackoff), a read
      // sent would wait in its queue until the next try fails, up to the 5 s timeout.
      await new Promise((resolve) => setTimeout(resolve, 7_000));
      const started = Date.now();
      for (let i = 0; i < 3; i += 1) {
        const unknown = await call(`${patient.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: `${key}-other-${i}` } });
        expect(unknown.status).toBe(503);
        expect(unknown.json()).toEqual({ error: 'Session store unavailable' });
      }
      expect(Date.now() - started).toBeLessThan(1_000);
      // The key read before Redis went away is still served from its last read, failing open.
      expect((await call(`${patient.proxyUrl}/${keyed.api_id}/`, { headers: { authorization: key } })).status).toBe(200);
    } finally {
      await patient.close();
      await redis.start();
    }
  });

  it('reports unready while a Redis with its connection up does not answer, and ready once it does, with no traffic', async () => {
    const keyless = compiledApi(uniqueId('api'), upstream.url, { api_limit: { rate: 100, per: 60 } });
    await writeConfigMap(namespace, keyless.api_id, JSON.stringify(compiledConfig([keyless])));
    await eventually(() => servesApi(sidecar, keyless.api_id)());
    await eventually(async () => (await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status === 200, 20_000, 'serving');
    // A hung server: the connection stays up, every command waits.
    await client.call('CLIENT', 'PAUSE', '2500', 'ALL');
    expect((await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status).toBe(503);
    const unready = await call(`${sidecar.healthUrl}/readyz`);
    expect(unready.status).toBe(503);
    expect(JSON.stringify(unready.json())).toContain('redis calls failing (timing out, or answered with errors)');
    // No request is sent from here on: the readiness checks alone find Redis back.
    await eventually(async () => (await call(`${sidecar.healthUrl}/readyz`)).status === 200, 10_000, 'ready again');
  });

  it('stays unready while Redis answers but refuses writes (full under noeviction), and is ready once it takes them', async () => {
    const keyless = compiledApi(uniqueId('api'), upstream.url, { api_limit: { rate: 100, per: 60 } });
    await writeConfigMap(namespace, keyless.api_id, JSON.stringify(compiledConfig([keyless])));
    await eventually(() => servesApi(sidecar, keyless.api_id)());
    await eventually(async () => (await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status === 200, 20_000, 'serving');
    await client.config('SET', 'maxmemory-policy', 'noeviction');
    await client.config('SET', 'maxmemory', '1');
    try {
      expect((await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status).toBe(503);
      // Each check probes Redis again; it answers (a PING would pass) but takes no write.
      for (let i = 0; i < 5; i += 1) {
        expect((await call(`${sidecar.healthUrl}/readyz`)).status).toBe(503);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect((await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status).toBe(503);
    } finally {
      await client.config('SET', 'maxmemory', '0');
    }
    await eventually(async () => (await call(`${sidecar.healthUrl}/readyz`)).status === 200, 10_000, 'ready again');
    expect((await call(`${sidecar.proxyUrl}/${keyless.api_id}/`)).status).toBe(200);
    // The probe's key expires by itself.
    const probes = await client.keys('gw:probe:*');
    expect(probes).toHaveLength(1);
    expect(await client.pttl(probes[0]!)).toBeGreaterThan(0);
  });
});

describe('stream rate limit on the upstream call', () => {
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  let namespace: string;

  beforeAll(async () => {
    namespace = await createNamespace('sc-stream');
    upstream = await startEchoUpstream();
    sidecar = await startTestSidecar(sidecarOptions(namespace));
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
  });

  it('lets `count` calls per interval reach the upstream and refuses what cannot get a slot in time', async () => {
    const api = compiledApi(uniqueId('api'), upstream.url, { stream_limit: { label: 'upstream', count: 2, interval_ms: 60_000 } });
    await deployApi(sidecar, namespace, api);
    const url = `${sidecar.proxyUrl}/${api.api_id}/`;
    expect((await call(url)).status).toBe(200);
    expect((await call(url)).status).toBe(200);
    const refused = await call(url);
    expect(refused.status).toBe(429);
    expect(refused.json()).toEqual({ error: 'Upstream rate limit exceeded' });
  });

  it('counts a request it refuses at no rate limit and in no quota', async () => {
    const redis = newRedis();
    const logging = await startTestSidecar(sidecarOptions(namespace), { env: { GW_ENABLE_REDIS_ROLLING_LIMITER: 'true' } });
    try {
      const api = compiledApi(uniqueId('api'), upstream.url, { keyless: false, api_limit: { rate: 10, per: 60 }, stream_limit: { label: 'upstream', count: 1, interval_ms: 60_000 } });
      await deployApi(logging, namespace, api);
      const key = await storeSession(redis, { rate: 10, per: 60, quota_max: 10, quota_renewal_rate: 3600, access_rights: { [api.api_id]: { api_id: api.api_id } } });
      const answers = [];
      for (let i = 0; i < 3; i += 1) answers.push(await call(`${logging.proxyUrl}/${api.api_id}/`, { headers: { authorization: key } }));
      expect(answers.map((a) => a.status)).toEqual([200, 429, 429]);
      expect(answers[2]!.json()).toEqual({ error: 'Upstream rate limit exceeded' });
      // The API's log, the key's log and the key's quota hold the one request that was let through.
      const hash = keyHash(key);
      expect(await redis.zcard(limiterKey(`a:${api.api_id}`, 'log'))).toBe(1);
      const [keyLog, ...moreLogs] = await redis.keys(`gw:rl:*${hash}*:log`);
      expect(moreLogs).toEqual([]);
      expect(await redis.zcard(keyLog!)).toBe(1);
      const [quota, ...moreQuotas] = await redis.keys(`gw:quota:*${hash}*`);
      expect(moreQuotas).toEqual([]);
      expect(await redis.hget(quota!, 'r')).toBe('9');
    } finally {
      redis.disconnect();
      await logging.close();
    }
  });
});

describe('a standalone gateway whose Redis is unreachable when it starts', () => {
  it('starts, serves its keyless API, reports its Keys\' sessions, and stores them once Redis answers, with no reload', async () => {
    const upstream = await startEchoUpstream();
    const redis = await startRedis();
    const client = new RedisClient(redis.url);
    const link = await latencyProxy(redis.url);
    link.refusing = true;
    const dir = await mkdtemp(join(tmpdir(), 'gw-no-redis-'));
    const rawKey = randomBytes(16).toString('hex');
    await writeFile(join(dir, 'all.yaml'), [
      keylessApiYaml('open', '/open/', upstream.url),
      `apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: { name: private }\nspec: { api_id: private, proxy: { listen_path: /private/, target_url: '${upstream.url}' } }\n`,
      `apiVersion: gw.dev/v1alpha1\nkind: Key\nmetadata: { name: by-hand }\nspec: { key_hash: ${keyHash(rawKey)}, access_rights: { private: { api_id: private } } }\n`,
    ].join('---\n'));
    const sidecar = await startTestSidecar({ ...sidecarOptions('default', link.url), configDir: dir, instanceId: uniqueId('no-redis') });
    const sessionProblems = async (): Promise<string[]> => {
      const body = (await call(`${sidecar.healthUrl}/readyz`)).json() as unknown as { problems: { subject: string; reason: string }[] };
      return body.problems.filter((p) => p.subject === 'Key sessions').map((p) => p.reason);
    };
    try {
      expect((await call(`${sidecar.proxyUrl}/open/`)).status).toBe(200);
      const [reason] = await sessionProblems();
      expect(reason).toMatch(/^the session store failed \(.+\); Keys' sessions may be out of date; trying again in \d+ s$/);
      expect(await client.exists(sessionKey(keyHash(rawKey)))).toBe(0);

      link.refusing = false;
      const callPrivate = async (): Promise<number> => (await call(`${sidecar.proxyUrl}/private/`, { headers: { authorization: rawKey } })).status;
      await eventually(async () => (await callPrivate()) === 200, 15_000, 'the Key served once Redis answers');
      expect(await client.exists(sessionKey(keyHash(rawKey)))).toBe(1);
      expect(await sessionProblems()).toEqual([]);
    } finally {
      await sidecar.close();
      await link.close();
      client.disconnect();
      await redis.stop();
      await upstream.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
