import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisSessionStore } from '../../../common/session-store.ts';
import { sessionKey } from '../../../common/redis-keys.ts';
import { CustomObjectsApi, Watch } from '@kubernetes/client-node';
import { group, kinds, version } from '../../../crds/kinds.ts';
import { KubernetesResourceStore } from '../../../sidecar/resources/kubernetes-store.ts';
import { createNamespace, kubeConfig, startRedis } from '../../harness/index.ts';
import { json, jsonType, startAdmin, type AdminServer } from './admin-client.ts';
import { ADMIN_SECRET, ADMIN_TEST_DB, clusterDeps, connected, keysIn, stallingKubeConfig, testRedis } from './fixtures.ts';

const auth: [string, string] = ['Admin-Auth', ADMIN_SECRET];

/** Every field of the create-key answer's `data`. */
const responseFields = [
  'access_rights', 'alias', 'allowance', 'apply_policies', 'apply_policy_id', 'basic_auth_data', 'certificate',
  'data_expires', 'date_created', 'enable_detailed_recording', 'expires', 'hmac_enabled', 'hmac_string',
  'id_extractor_deadline', 'is_inactive', 'jwt_data', 'key_id', 'last_check', 'last_updated', 'max_query_depth',
  'meta_data', 'monitor', 'oauth_client_id', 'oauth_keys', 'org_id', 'per', 'rate', 'quota_max', 'quota_remaining',
  'quota_renewal_rate', 'quota_renews', 'session_lifetime', 'smoothing', 'tags', 'throttle_interval', 'throttle_retry_limit',
];

/** The types of the create-key answer's `data` (smoothing: the object, docs/behaviour.md#smoothing). */
type FieldType = 'string' | 'integer' | 'number' | 'boolean' | 'any' | { array: FieldType } | { object: Record<string, FieldType> } | 'map';
const str: FieldType = 'string';
const int: FieldType = 'integer';
const bool: FieldType = 'boolean';
const recordTypes: Record<string, FieldType> = {
  access_rights: 'map', alias: str, allowance: int, apply_policies: { array: str }, apply_policy_id: str,
  basic_auth_data: { object: { hash_type: str, password: str, user: str } }, certificate: str, data_expires: int,
  date_created: str, enable_detailed_recording: bool, expires: int, hmac_enabled: bool, hmac_string: str,
  id_extractor_deadline: int, is_inactive: bool, jwt_data: { object: { secret: str } }, key_id: str, last_check: int,
  last_updated: str, max_query_depth: int, meta_data: 'any', monitor: { object: { trigger_limits: { array: 'number' } } },
  oauth_client_id: str, oauth_keys: 'map', org_id: str, per: int, rate: int, quota_max: int, quota_remaining: int,
  quota_renewal_rate: int, quota_renews: int, session_lifetime: int,
  smoothing: { object: { enabled: bool, threshold: int, step: int, trigger: 'number', delay: int } },
  tags: { array: str }, throttle_interval: int, throttle_retry_limit: int,
};

/** Where `value` differs from `type` (an empty list: it matches). */
function typeErrors(value: unknown, type: FieldType, at: string): string[] {
  const isObject = typeof value === 'object' && value !== null && !Array.isArray(value);
  if (type === 'any') return [];
  if (type === 'integer') return Number.isInteger(value) ? [] : [`${at}: ${JSON.stringify(value)} is no integer`];
  if (type === 'number' || type === 'string' || type === 'boolean') return typeof value === type ? [] : [`${at}: ${JSON.stringify(value)} is no ${type}`];
  if (type === 'map') return isObject ? [] : [`${at}: ${JSON.stringify(value)} is no object`];
  if ('array' in type) return Array.isArray(value) ? value.flatMap((item, i) => typeErrors(item, type.array, `${at}.${i}`)) : [`${at}: ${JSON.stringify(value)} is no array`];
  if (!isObject) return [`${at}: ${JSON.stringify(value)} is no object`];
  return Object.entries(type.object).flatMap(([field, fieldType]) => typeErrors((value as Record<string, unknown>)[field], fieldType, `${at}.${field}`));
}

/** The resourceVersion of the namespace's Key list now, to replay what happens to them from. */
async function keysVersion(namespace: string): Promise<string> {
  const list = (await kubeConfig().makeApiClient(CustomObjectsApi).listNamespacedCustomObject({ group, version, namespace, plural: kinds.Key.plural })) as { metadata: { resourceVersion: string } };
  return list.metadata.resourceVersion;
}

/**
 * The events of the namespace's Keys since `resourceVersion`, as a watch replays them in
 * `forMs`; none from a watch the API server turned away (it may, with 429, while it starts).
 */
async function keyEventsSince(namespace: string, resourceVersion: string, forMs: number): Promise<string[]> {
  const events: string[] = [];
  const watching = await new Watch(kubeConfig()).watch(`/apis/${group}/${version}/namespaces/${namespace}/${kinds.Key.plural}`, { resourceVersion }, (type) => events.push(type), () => undefined);
  await new Promise((resolve) => setTimeout(resolve, forMs));
  watching.abort();
  return events;
}

const grantsPets = { access_rights: { pets: { api_name: 'Pets' } } };

describe('POST /admin/org/keys on the API server and Redis', () => {
  let namespace: string;
  let redis: Redis;
  let admin: AdminServer;

  beforeAll(async () => {
    namespace = await createNamespace('admin-keys');
    redis = await connected(testRedis());
    admin = await startAdmin(clusterDeps(namespace, redis).deps);
  });

  afterAll(async () => {
    await admin?.close();
    await redis?.flushdb();
    redis?.disconnect();
  });

  beforeEach(async () => {
    await redis.flushdb();
  });

  it('creates a key: session in Redis, Key resource with the hash only, raw key only in the response', async () => {
    const request = {
      alias: 'mobile-app',
      rate: 10,
      per: 60,
      apply_policies: ['gold'],
      quota_max: 1000,
      tags: ['beta'],
      meta_data: { team: 'mobile' },
      expires: 0,
    };
    const res = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(request) });
    expect(res.status).toBe(200);
    const body = res.json as { api_model: unknown; key_id: string; key_hash: string; data: Record<string, unknown> };
    expect(body.api_model).toEqual({});
    expect(body.key_id).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(body.key_hash).toBe(createHash('sha256').update(body.key_id).digest('hex'));
    expect(Object.keys(body.data).sort()).toEqual([...responseFields].sort());
    expect(body.data).toMatchObject({ ...request, allowance: 10, quota_remaining: 1000, key_id: `key-${body.key_hash.slice(0, 24)}` });
    expect(new Date(body.data.date_created as string).getTime()).toBeGreaterThan(Date.now() - 60_000);
    expect(body.data.last_updated).toBe(body.data.date_created);

    const stored = await redis.get(sessionKey(body.key_hash));
    expect(stored).not.toBeNull();
    expect(stored).not.toContain(body.key_id);
    expect(JSON.parse(stored!)).toMatchObject({ alias: 'mobile-app', rate: 10, per: 60, namespace });
    expect(await redis.dbsize()).toBe(1);

    const keys = await keysIn(namespace);
    expect(keys).toHaveLength(1);
    expect(keys[0]!.metadata.name).toBe(body.data.key_id);
    expect(keys[0]!.spec).toEqual({ ...request, key_hash: body.key_hash });
    expect(JSON.stringify(keys[0])).not.toContain(body.key_id);
  });

  it('stores access_rights and smoothing as session rights (same derivation as the operator)', async () => {
    const request = {
      rate: 10,
      per: 1,
      access_rights: {
        'pets-api': {
          api_name: 'Pets',
          limit: { rate: 5, per: 1, quota_max: -1, quota_renewal_rate: 0, throttle_interval: 0, throttle_retry_limit: 0 },
        },
      },
      smoothing: { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 5 },
    };
    const res = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(request) });
    expect(res.status).toBe(200);
    const { key_hash: hash, data } = res.json as { key_hash: string; data: { key_id: string } };
    const session = JSON.parse((await redis.get(sessionKey(hash)))!);
    expect(session.access_rights['pets-api']).toMatchObject({ api_id: 'pets-api', api_name: 'Pets', limit: { rate: 5, per: 1 } });
    expect(session.smoothing).toEqual(request.smoothing);
    const key = (await keysIn(namespace)).find((k) => k.metadata.name === data.key_id);
    expect(key?.spec).toEqual({ ...request, key_hash: hash });
  });

  it('answers and stores what the gateway enforces: allowance is rate, quota_remaining at most quota_max', async () => {
    const res = await admin.call('POST', '/admin/org/keys', {
      headers: [auth, jsonType],
      body: json({ ...grantsPets, rate: 5, per: 10, allowance: 1, quota_max: 3, quota_remaining: 50, quota_renewal_rate: 3600 }),
    });
    expect(res.status).toBe(200);
    const body = res.json as { key_hash: string; data: Record<string, unknown> };
    expect(body.data).toMatchObject({ rate: 5, allowance: 5, quota_max: 3, quota_remaining: 3 });
    expect(JSON.parse((await redis.get(sessionKey(body.key_hash)))!)).toMatchObject({ rate: 5, allowance: 5, quota_remaining: 3 });
  });

  it('answers every field of data with the key record\'s type: no null where the record has an object, number, boolean or string', async () => {
    for (const request of [{ apply_policies: ['gold'] }, { ...grantsPets, rate: 5, per: 1, smoothing: { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 5 } }]) {
      const res = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(request) });
      expect(res.status).toBe(200);
      const { data } = res.json as { data: Record<string, unknown> };
      expect(Object.keys(data).sort()).toEqual(Object.keys(recordTypes).sort());
      for (const [field, type] of Object.entries(recordTypes)) {
        expect(typeErrors(data[field], type, `data.${field}`)).toEqual([]);
      }
      expect(data.smoothing).toEqual('smoothing' in request ? request.smoothing : { enabled: false, threshold: 0, step: 0, trigger: 0, delay: 0 });
    }
  });

  it('takes back the switched-off smoothing it answers, and stores no smoothing for it', async () => {
    const first = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, rate: 5, per: 1 }) });
    const answered = (first.json as { data: { smoothing: unknown } }).data.smoothing;
    expect(answered).toEqual({ enabled: false, threshold: 0, step: 0, trigger: 0, delay: 0 });
    for (const smoothing of [answered, { enabled: false }]) {
      const res = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, rate: 5, per: 1, smoothing }) });
      expect(res.status).toBe(200);
      const { key_hash: hash, data } = res.json as { key_hash: string; data: { key_id: string; smoothing: unknown } };
      expect(data.smoothing).toEqual(answered);
      expect(JSON.parse((await redis.get(sessionKey(hash)))!).smoothing).toBeNull();
      const key = (await keysIn(namespace)).find((k) => k.metadata.name === data.key_id);
      expect(key?.spec.smoothing).toEqual(smoothing);
    }
    const refused = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, rate: 5, per: 1, smoothing: { enabled: true } }) });
    expect(refused.status).toBe(400);
    expect((refused.json as { Message: string }).Message).toContain('smoothing.threshold: threshold must be set, at least 1, when smoothing is enabled');
  });

  it('answers access rights that can be sent back as they are: no limit where there is none, a limit\'s smoothing switched off', async () => {
    const off = { enabled: false, threshold: 0, step: 0, trigger: 0, delay: 0 };
    const request = { access_rights: { pets: { api_name: 'Pets' }, 'pets-api': { api_id: 'pets-api', limit: { rate: 5, per: 10 } } } };
    const first = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(request) });
    expect(first.status).toBe(200);
    const answered = first.json as { key_hash: string; data: { access_rights: unknown } };
    expect(answered.data.access_rights).toEqual({
      pets: { api_id: 'pets', api_name: 'Pets', versions: [] },
      'pets-api': { api_id: 'pets-api', api_name: '', versions: [], limit: { rate: 5, per: 10, quota_max: -1, quota_renewal_rate: 0, throttle_interval: 0, throttle_retry_limit: 0, smoothing: off } },
    });
    const again = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ access_rights: answered.data.access_rights }) });
    expect(again.status).toBe(200);
    const resent = again.json as { key_hash: string; data: { access_rights: unknown } };
    expect(resent.data.access_rights).toEqual(answered.data.access_rights);
    const storedRights = async (hash: string): Promise<unknown> => (JSON.parse((await redis.get(sessionKey(hash)))!) as { access_rights: unknown }).access_rights;
    expect(await storedRights(resent.key_hash)).toEqual(await storedRights(answered.key_hash));
    expect(((await storedRights(answered.key_hash)) as Record<string, { limit: unknown }>).pets!.limit).toBeNull();
  });

  it('refuses a key with neither access rights nor policies, and writes no session and no Key', async () => {
    const keysBefore = (await keysIn(namespace)).map((k) => k.metadata.name);
    for (const request of [{}, { rate: 5, per: 1 }, { alias: 'nothing', apply_policies: [], access_rights: {} }]) {
      const res = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(request) });
      expect(res.status).toBe(400);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Failed to create key, keys must have at least one Access Rights record set.', Meta: null });
      expect(res.headers['x-gw-error-code']).toBe('key_without_access');
    }
    expect(await redis.dbsize()).toBe(0);
    expect((await keysIn(namespace)).map((k) => k.metadata.name)).toEqual(keysBefore);
  });

  it('gives every key a different raw key', async () => {
    const a = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(grantsPets) });
    const b = await admin.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json(grantsPets) });
    expect([a.status, b.status]).toEqual([200, 200]);
    expect((a.json as { key_id: string }).key_id).not.toBe((b.json as { key_id: string }).key_id);
    expect(await redis.dbsize()).toBe(2);
  });

  const refusals: [string, [string, string][], string | Buffer | undefined, number, RegExp][] = [
    ['no Admin-Auth', [jsonType], '{}', 403, /^Not authorised$/],
    ['a wrong Admin-Auth', [['Admin-Auth', 'wrong'], jsonType], '{}', 403, /^Not authorised$/],
    ['an Admin-Auth differing in case', [['Admin-Auth', ADMIN_SECRET.toUpperCase()], jsonType], '{}', 403, /^Not authorised$/],
    ['Admin-Auth given twice', [auth, auth, jsonType], '{}', 400, /more than once: admin-auth/],
    ['an empty body', [auth, jsonType], '', 400, /^Request body empty$/],
    ['a blank body', [auth, jsonType], '  \n ', 400, /^Request body empty$/],
    ['malformed JSON', [auth, jsonType], '{"rate": 1,', 400, /not valid JSON/],
    ['a JSON array', [auth, jsonType], '[]', 400, /body: .*expected object/],
    ['rate as a string', [auth, jsonType], json({ rate: '5', per: 1 }), 400, /rate: /],
    ['expires as a date', [auth, jsonType], json({ expires: '2030-01-01' }), 400, /expires: /],
    ['a fractional allowance', [auth, jsonType], json({ allowance: 1.5 }), 400, /allowance: /],
    ['tags with a number', [auth, jsonType], json({ tags: ['a', 2] }), 400, /tags\.1: /],
    ['meta_data as a string', [auth, jsonType], json({ meta_data: 'x' }), 400, /meta_data: /],
    ['an unknown field', [auth, jsonType], json({ rate: 1, per: 1, secret_field: true }), 400, /secret_field/],
    ['rate without per', [auth, jsonType], json({ rate: 5 }), 400, /rate and per/],
    ['a smoothing delay over a year', [auth, jsonType], json({ ...grantsPets, rate: 5, per: 1, smoothing: { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 31_536_001 } }), 400, /smoothing\.delay: Too big/],
    ['a negative smoothing step', [auth, jsonType], json({ ...grantsPets, rate: 5, per: 1, smoothing: { enabled: true, threshold: 2, step: -1, trigger: 0.5, delay: 0 } }), 400, /^Invalid request body: smoothing\.step: step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off$/],
    ['a negative smoothing step, switched off', [auth, jsonType], json({ ...grantsPets, rate: 5, per: 1, smoothing: { enabled: false, step: -1 } }), 400, /^Invalid request body: smoothing\.step: step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off$/],
    ['a text/plain body', [auth, ['Content-Type', 'text/plain']], '{}', 415, /application\/json/],
    ['a latin-1 charset', [auth, ['Content-Type', 'application/json; charset=latin1']], '{}', 415, /application\/json/],
    ['Content-Type given twice', [auth, jsonType, jsonType], '{}', 400, /more than once: content-type/],
    ['invalid UTF-8', [auth, jsonType], Buffer.from([0x7b, 0x22, 0x61, 0xff, 0xfe, 0x22, 0x7d]), 400, /UTF-8/],
    ['a gzipped body', [auth, jsonType, ['Content-Encoding', 'gzip']], gzipSync(json(grantsPets)), 415, /Content-Encoding/],
    [
      'meta_data nested 20,000 deep',
      [auth, jsonType],
      `{"apply_policies":["gold"],"meta_data":{"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}}`,
      400,
      /^Invalid request body: body: nested more than 64 levels deep$/,
    ],
    ['a 2 MiB body', [auth, jsonType], json({ alias: 'x'.repeat(2 * 1024 * 1024) }), 413, /^Request body too large: at most 1048576 bytes$/],
    ['an oversized alias', [auth, jsonType], json({ alias: 'é'.repeat(300) }), 400, /alias: /],
    ['an alias with a lone surrogate', [auth, jsonType], `{"apply_policies":["gold"],"alias":"a\\ud800b"}`, 400, /^Invalid request body: alias: must not contain unpaired surrogates$/],
    ['a meta_data field named by a lone surrogate', [auth, jsonType], `{"apply_policies":["gold"],"meta_data":{"\\udc00":1}}`, 400, /^Invalid request body: meta_data \(a field name\): must not contain unpaired surrogates$/],
    ['a lone surrogate deep in meta_data', [auth, jsonType], `{"apply_policies":["gold"],"meta_data":{"teams":[{"name":"ok"},{"name":"\\ud83d"}]}}`, 400, /^Invalid request body: meta_data\.teams\.1\.name: must not contain unpaired surrogates$/],
    ['an alias with a terminal escape', [auth, jsonType], json({ ...grantsPets, alias: 'ops\u001b]0;owned\u0007' }), 400, /alias: must not contain control characters/],
    ['a policy named by a path', [auth, jsonType], json({ apply_policies: ['gold', '../kube-system/admin'] }), 400, /apply_policies\.1: must be the name of a Policy/],
    ['an access right keyed by no api_id', [auth, jsonType], json({ access_rights: { 'pets/../x': {} } }), 400, /access_rights: .*keyed by an api_id/],
  ];

  it.each(refusals)('refuses %s in the dashboard shape and stores nothing', async (_label, headers, body, status, message) => {
    const keysBefore = (await keysIn(namespace)).map((k) => k.metadata.name);
    const res = await admin.call('POST', '/admin/org/keys', { headers, body });
    expect(res.status).toBe(status);
    const err = res.json as { Status: string; Message: string; Meta: unknown };
    expect(err).toEqual({ Status: 'Error', Message: expect.stringMatching(message), Meta: null });
    expect(res.headers['x-gw-error-code']).toEqual(expect.any(String));
    expect(await redis.dbsize()).toBe(0);
    expect((await keysIn(namespace)).map((k) => k.metadata.name)).toEqual(keysBefore);
  });

  it('answers 500 "save failed" when the session cannot be stored, writes no Key, and works once Redis is back', async () => {
    const own = await startRedis();
    const ownClient = testRedis(own.url);
    await connected(ownClient);
    const ns = await createNamespace('admin-keys-down');
    const server = await startAdmin(clusterDeps(ns, ownClient, { sessions: new RedisSessionStore(ownClient) }).deps);
    try {
      await own.stop();
      const res = await server.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, rate: 1, per: 1 }) });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Failed to create key, save of the new session failed', Meta: null });
      expect(await keysIn(ns)).toHaveLength(0);

      await own.start();
      await connected(ownClient);
      const again = await server.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, rate: 1, per: 1 }) });
      expect(again.status).toBe(200);
      expect(await ownClient.exists(sessionKey((again.json as { key_hash: string }).key_hash))).toBe(1);
      expect(await keysIn(ns)).toHaveLength(1);
    } finally {
      await server.close();
      ownClient.disconnect();
      await own.stop();
    }
  });

  it('leaves no session behind when its write timed out and Redis runs it later', async () => {
    const own = await startRedis();
    const ownClient = new Redis(own.url, { db: ADMIN_TEST_DB, commandTimeout: 200, maxRetriesPerRequest: 1 });
    const pauser = testRedis(own.url);
    const ns = await createNamespace('admin-keys-stall');
    const server = await startAdmin(clusterDeps(ns, ownClient, { sessions: new RedisSessionStore(ownClient) }).deps);
    try {
      await Promise.all([connected(ownClient), connected(pauser)]);
      // Redis holds every command for 1.5 s: the session's write times out, then runs.
      await pauser.call('CLIENT', 'PAUSE', '1500', 'ALL');
      const res = await server.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, alias: 'stalled' }) });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Failed to create key, save of the new session failed', Meta: null });
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      expect(await pauser.keys('*')).toEqual([]);
      expect(await keysIn(ns)).toHaveLength(0);
    } finally {
      await server.close();
      ownClient.disconnect();
      pauser.disconnect();
      await own.stop();
    }
  });

  it('answers 500 when the API server does not write the Key in time, and deletes the Key that lands later with its session', async () => {
    const stalled = await stallingKubeConfig(1_000);
    const ns = await createNamespace('admin-keys-late');
    const resources = new KubernetesResourceStore(stalled.kc, [ns], { keyCreateDeadlineMs: 500 });
    const server = await startAdmin(clusterDeps(ns, redis, { resources }).deps);
    // What happens to Keys from here is replayed from this version: the Key may exist for only a moment.
    const since = await keysVersion(ns);
    try {
      const started = Date.now();
      const res = await server.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, alias: 'late' }) });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Failed to create key, save of the new session failed', Meta: null });
      expect(Date.now() - started).toBeLessThan(2_500);
      expect(await redis.dbsize()).toBe(0);
      // The create lands a few round trips of 1 s in (TLS, then the request), and is deleted again.
      let events: string[] = [];
      for (const until = Date.now() + 15_000; events.length < 2 && Date.now() < until; ) events = await keyEventsSince(ns, since, 500);
      expect(events).toEqual(['ADDED', 'DELETED']);
      expect(await keysIn(ns)).toHaveLength(0);
      expect(await redis.dbsize()).toBe(0);
    } finally {
      await server.close();
      await stalled.close();
    }
  });

  it('rolls the session back when the Key resource cannot be written', async () => {
    // Keys are written to a namespace that does not exist: the API server refuses the Key.
    const server = await startAdmin(clusterDeps(namespace, redis, { namespace: `${namespace}-missing` }).deps);
    try {
      const res = await server.call('POST', '/admin/org/keys', { headers: [auth, jsonType], body: json({ ...grantsPets, alias: 'x' }) });
      expect(res.status).toBe(500);
      expect((res.json as { Message: string }).Message).toBe('Failed to create key, save of the new session failed');
      expect(await redis.dbsize()).toBe(0);
    } finally {
      await server.close();
    }
  });
});
