import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CompiledApi, CompiledKeyLimit, CompiledPolicy } from '../../../crds/compiled.ts';
import { keyHash } from '../../../crds/key-hash.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { run as kubectlGw } from '../../../plugin/kubectl-gw.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client } from '../operator/support.ts';
import { policy } from '../../support/compiled-fixtures.ts';
import { call, compiledApi, deployApi, newRedis, sidecarOptions, startTestSidecar, storeSession, uniqueId, type CallResult } from './helpers.ts';

const ADMIN_SECRET = 'test-admin-secret';
const PER = 60;
const endpoint = { path: '/items/{id}', pattern: '^/items/([^/]+)$', method: 'GET', rate: 2, per: PER };
const keyLimit = (rate: number): CompiledKeyLimit => ({
  rate: { rate, per: PER },
  quota_max: -1,
  quota_renewal_rate: 0,
  throttle_interval: 0,
  throttle_retry_limit: 0,
  smoothing: null,
});
const right = (apiId: string, parts: { limit?: CompiledKeyLimit; endpoints?: (typeof endpoint)[] } = {}) => ({
  api_id: apiId,
  api_name: apiId,
  limit: parts.limit ?? null,
  endpoints: parts.endpoints ?? [],
});

function explain(sidecar: RunningSidecar, hash: string, query: Record<string, string>, secret = ADMIN_SECRET): Promise<CallResult> {
  return call(`${sidecar.adminUrl}/gw/keys/${hash}/limits?${new URLSearchParams(query).toString()}`, { headers: { 'x-gw-authorization': secret } });
}

/** The X-RateLimit-* of an answer, as numbers. */
const rateHeaders = (res: CallResult) => ({
  limit: Number(res.headers['x-ratelimit-limit']),
  remaining: Number(res.headers['x-ratelimit-remaining']),
  reset: Number(res.headers['x-ratelimit-reset']),
});

interface Level {
  level: string;
  source: { kind: string; name: string };
  rule: string | null;
  rate: number;
  limit: number;
  remaining: number;
  reset: number;
  count: number;
  algorithm: string;
}

/**
 * The effective-limits read (docs/behaviour.md#why-was-a-request-limited) against a
 * running gateway on real Redis: for a request refused at each level, it names that level
 * and shows the figures the refusal's X-RateLimit headers showed.
 */
describe('GET /gw/keys/{keyHash}/limits: why a request was limited', () => {
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  let namespace: string;
  let redis: Redis;
  const settings: Partial<GatewaySettings> = { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' };
  /** Every API's config carries every policy, as the operator compiles granting policies into each. */
  const policies: CompiledPolicy[] = [];

  beforeAll(async () => {
    namespace = await createNamespace('sc-key-limits');
    upstream = await startEchoUpstream();
    redis = newRedis();
    sidecar = await startTestSidecar(sidecarOptions(namespace));
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
    redis?.disconnect();
  });

  async function deploy(overrides: Partial<CompiledApi>, newPolicies: CompiledPolicy[] = []): Promise<CompiledApi> {
    policies.push(...newPolicies);
    const api = compiledApi(uniqueId('kl'), upstream.url, { keyless: false, ...overrides });
    await deployApi(sidecar, namespace, api, settings, policies);
    return api;
  }

  /** Calls until the gateway refuses (bounded), and returns the refusal. */
  async function refusal(url: string, raw: string): Promise<CallResult> {
    for (let i = 0; i < 10; i++) {
      const res = await call(url, { headers: { authorization: raw } });
      if (res.status !== 200) return res;
    }
    throw new Error(`${url} was never refused`);
  }

  const cases: [string, string, number, () => Promise<{ api: CompiledApi; session: Record<string, unknown>; path: string }>][] = [
    [
      'api_endpoint',
      'API Rate Limit Exceeded',
      429,
      async () => {
        const api = await deploy({ api_limit: { rate: 100, per: PER }, endpoint_limits: [endpoint] });
        return { api, session: { rate: 100, per: PER, access_rights: { [api.api_id]: right(api.api_id) } }, path: '/items/7' };
      },
    ],
    [
      'api',
      'API Rate Limit Exceeded',
      429,
      async () => {
        const api = await deploy({ api_limit: { rate: 2, per: PER } });
        return { api, session: { rate: 100, per: PER, access_rights: { [api.api_id]: right(api.api_id) } }, path: '/' };
      },
    ],
    [
      'key_endpoint',
      'Rate Limit Exceeded',
      429,
      async () => {
        const id = uniqueId('api');
        const p = policy(uniqueId('ep'), { rate: { rate: 100, per: PER }, access_rights: { [id]: right(id, { endpoints: [endpoint] }) } });
        const api = await deploy({ api_id: id, listen_path: `/${id}/` }, [p]);
        return { api, session: { apply_policies: [p.source.name] }, path: '/items/7' };
      },
    ],
    [
      'key_per_api',
      'Rate Limit Exceeded',
      429,
      async () => {
        const id = uniqueId('api');
        const p = policy(uniqueId('per-api'), { rate: { rate: 100, per: PER }, access_rights: { [id]: right(id, { limit: keyLimit(2) }) } });
        const api = await deploy({ api_id: id, listen_path: `/${id}/` }, [p]);
        return { api, session: { apply_policies: [p.source.name] }, path: '/' };
      },
    ],
    [
      'key_global',
      'Rate Limit Exceeded',
      429,
      async () => {
        const id = uniqueId('api');
        const slow = policy(uniqueId('slow'), { rate: { rate: 1, per: PER }, access_rights: { [id]: right(id) } });
        const fast = policy(uniqueId('fast'), { rate: { rate: 2, per: PER }, access_rights: { [id]: right(id) } });
        const api = await deploy({ api_id: id, listen_path: `/${id}/` }, [slow, fast]);
        return { api, session: { apply_policies: [slow.source.name, fast.source.name] }, path: '/' };
      },
    ],
  ];

  it.each(cases)('a request refused at the %s level: the read names it, with the 429\'s own figures', async (level, message, status, setUp) => {
    const { api, session, path } = await setUp();
    const raw = await storeSession(redis, session);
    const requestPath = `/${api.api_id}${path}`;
    const refused = await refusal(`${sidecar.proxyUrl}${requestPath}`, raw);
    expect([refused.status, refused.json().error]).toEqual([status, message]);

    const res = await explain(sidecar, keyHash(raw), { api_id: api.api_id, path: requestPath, method: 'GET' });
    expect(res.status).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ api_id: api.api_id, path: requestPath, method: 'GET', access: 'granted', refused_by: level, answer: { status, code: refused.headers['x-gw-error-code'] } });
    const refusing = (body.limits as Level[]).find((l) => l.level === level)!;
    expect(refusing).toMatchObject({ algorithm: 'sliding_log', remaining: 0 });
    const headers = rateHeaders(refused);
    expect({ limit: refusing.limit, remaining: refusing.remaining }).toEqual({ limit: headers.limit, remaining: headers.remaining });
    // The read is of a request now, which the log's refused entry would hold back, where the
    // 429's reset went by the entry before it: the same second, or the next if the two straddled one.
    expect(refusing.reset - headers.reset).toBeOneOf([0, 1]);
    expect(res.text).not.toContain(raw);

    // The same answer through `kubectl gw limits`, which finds the hash on the Key resource.
    const name = `key-${level.replaceAll('_', '-')}`;
    await client(kubeConfig()).create('Key', namespace, { metadata: { name }, spec: { key_hash: keyHash(raw) } });
    const flags = [name, '-n', namespace, '--api', api.api_id, '--path', requestPath, '--admin-url', sidecar.adminUrl, '--kubeconfig', testEnv().kubeconfig];
    const env = { GW_ADMIN_SECRET: ADMIN_SECRET };
    const shown = await kubectlGw(['limits', ...flags], env);
    expect(shown.split('\n')[0]).toBe(`Key ${namespace}/${name} on API ${api.api_id}, GET ${requestPath}: a request now is refused by ${level}: ${status} ${String(refused.headers['x-gw-error-code'])}`);
    expect(shown).toMatch(new RegExp(`^${level}\\s+\\S+\\s+.+?\\s+sliding_log\\s+\\d+\\s+${refusing.limit}\\s+0\\s+\\d+s$`, 'm'));
    expect(JSON.parse(await kubectlGw(['limits', ...flags, '-o', 'json'], env))).toMatchObject({ refused_by: level, limits: expect.arrayContaining([refusing]) });
  });

  it('shows what a more specific limit replaced and which policy won by effective rate', async () => {
    const id = uniqueId('api');
    const slow = policy(uniqueId('slow'), { rate: { rate: 1, per: PER }, access_rights: { [id]: right(id) } });
    const fast = policy(uniqueId('fast'), { rate: { rate: 5, per: PER }, access_rights: { [id]: right(id) } });
    const api = await deploy({ api_id: id, listen_path: `/${id}/`, api_limit: { rate: 100, per: PER }, endpoint_limits: [{ ...endpoint, rate: 50 }] }, [slow, fast]);
    const raw = await storeSession(redis, { apply_policies: [slow.source.name, fast.source.name] });
    const allowed = await call(`${sidecar.proxyUrl}/${id}/items/1`, { headers: { authorization: raw } });
    expect(allowed.status).toBe(200);

    const body = (await explain(sidecar, keyHash(raw), { api_id: id, path: `/${id}/items/1` })).json();
    expect(body).toMatchObject({ outcome: 'allowed', refused_by: null, answer: null });
    expect((body.limits as Level[]).map(({ level, source, rule, count, remaining }) => ({ level, source: source.name, rule, count, remaining }))).toEqual([
      { level: 'api_endpoint', source: api.source.name, rule: 'GET /items/{id}', count: 1, remaining: 49 },
      { level: 'key_global', source: fast.source.name, rule: null, count: 1, remaining: 4 },
    ]);
    expect(body.passed_over).toEqual([{ level: 'api', source: api.source, rule: null, rate: 100, per: PER }]);
    expect(body.chosen_over).toEqual([{ level: 'key_global', source: slow.source, rule: null, rate: 1, per: PER }]);
    // Reading took nothing: the next request finds the same allowance less its own.
    const next = await call(`${sidecar.proxyUrl}/${id}/items/1`, { headers: { authorization: raw } });
    expect(rateHeaders(next).remaining).toBe(3);
  });

  it("lists a Policy's global limit that its per-API limit replaced on the API, as it lists the key's own", async () => {
    const id = uniqueId('api');
    const perApi = policy(uniqueId('per-api'), { rate: { rate: 50, per: PER }, access_rights: { [id]: right(id, { limit: keyLimit(3) }) } });
    await deploy({ api_id: id, listen_path: `/${id}/` }, [perApi]);
    const byPolicy = await storeSession(redis, { apply_policies: [perApi.source.name] });
    const policyRead = (await explain(sidecar, keyHash(byPolicy), { api_id: id })).json();
    expect((policyRead.limits as Level[]).map(({ level, source, rate }) => ({ level, source: source.name, rate }))).toEqual([{ level: 'key_per_api', source: perApi.source.name, rate: 3 }]);
    expect(policyRead.passed_over).toEqual([{ level: 'key_global', source: perApi.source, rule: null, rate: 50, per: PER }]);

    const own = await storeSession(redis, { rate: 40, per: PER, access_rights: { [id]: { ...right(id), limit: { rate: 4, per: PER } } } });
    const ownRead = (await explain(sidecar, keyHash(own), { api_id: id })).json();
    expect((ownRead.limits as Level[]).map(({ level, rate }) => ({ level, rate }))).toEqual([{ level: 'key_per_api', rate: 4 }]);
    expect((ownRead.passed_over as { level: string; rate: number; per: number }[]).map(({ level, rate, per }) => ({ level, rate, per }))).toEqual([{ level: 'key_global', rate: 40, per: PER }]);
  });

  it('a smoothed limit is read as the next request would meet it: a step up that is due admits it', async () => {
    const id = uniqueId('api');
    const api = await deploy({ api_id: id, listen_path: `/${id}/` });
    // The delay leaves a slow machine time for the five requests before the next step is due.
    const smoothing = { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 2 };
    const raw = await storeSession(redis, { rate: 10, per: PER, smoothing, access_rights: { [id]: right(id) } });
    const url = `${sidecar.proxyUrl}/${id}/`;
    // 2, 2, then a step to 4 (2 over 2 − 2 × 0.5), 4, and a refusal: the next step waits for the delay.
    const answers: CallResult[] = [];
    for (let i = 0; i < 5; i++) answers.push(await call(url, { headers: { authorization: raw } }));
    expect(answers.map((res) => [res.status, rateHeaders(res).limit])).toEqual([[200, 2], [200, 2], [200, 4], [200, 4], [429, 4]]);
    await new Promise((resolve) => setTimeout(resolve, 2_100));

    const body = (await explain(sidecar, keyHash(raw), { api_id: api.api_id, path: `/${id}/`, method: 'GET' })).json();
    expect(body).toMatchObject({ outcome: 'allowed', refused_by: null });
    const own = (body.limits as Level[]).find((l) => l.level === 'key_global')!;
    expect({ limit: own.limit, remaining: own.remaining, count: own.count }).toEqual({ limit: 6, remaining: 1, count: 5 });
    const next = await call(url, { headers: { authorization: raw } });
    expect([next.status, rateHeaders(next).limit, rateHeaders(next).remaining]).toEqual([200, 6, 0]);
  });

  it('smoothing on a scope with no rate is shown as unused, with the reason, not left out', async () => {
    const id = uniqueId('api');
    const smoothing = { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 0 };
    const norate = policy(uniqueId('norate'), { smoothing, access_rights: { [id]: right(id) } });
    const api = await deploy({ api_id: id, listen_path: `/${id}/`, smoothing }, [norate]);
    const raw = await storeSession(redis, { apply_policies: [norate.source.name] });
    const body = (await explain(sidecar, keyHash(raw), { api_id: id })).json();
    const reason = 'no rate at this scope (rate 0: no limit), so nothing to smooth';
    expect(body).toMatchObject({ outcome: 'allowed', limits: [] });
    expect(body.unused_smoothing).toEqual([
      { level: 'api', source: api.source, rule: null, smoothing, reason },
      { level: 'key_global', source: norate.source, rule: null, smoothing, reason },
    ]);

    const name = 'key-unused-smoothing';
    await client(kubeConfig()).create('Key', namespace, { metadata: { name }, spec: { key_hash: keyHash(raw) } });
    const shown = await kubectlGw(['limits', name, '-n', namespace, '--api', id, '--admin-url', sidecar.adminUrl, '--kubeconfig', testEnv().kubeconfig], { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(shown).toContain(`smoothing not applied:\n  api  ApiDefinition/${api.source.name}  ${reason}\n  key_global  Policy/${norate.source.name}  ${reason}\n`);
  });

  it('a key that may not call the API is explained as refused access, not limits', async () => {
    const api = await deploy({ api_limit: { rate: 5, per: PER } });
    const raw = await storeSession(redis, { rate: 5, per: PER, is_inactive: true, access_rights: { [api.api_id]: right(api.api_id) } });
    const body = (await explain(sidecar, keyHash(raw), { api_id: api.api_id })).json();
    expect(body).toMatchObject({ access: 'inactive', outcome: 'access_denied', answer: { status: 403, code: 'access_denied' }, limits: [] });
  });

  it('an API that is not active is explained as the proxy refuses it: before the key and the limits', async () => {
    const api = await deploy({ active: false, api_limit: { rate: 5, per: PER } });
    // The key may not call it either: the inactive API is what a request meets first.
    const raw = await storeSession(redis, { rate: 5, per: PER, is_inactive: true, access_rights: { [api.api_id]: right(api.api_id) } });
    const proxied = await call(`${sidecar.proxyUrl}/${api.api_id}/`, { headers: { authorization: raw } });
    expect([proxied.status, proxied.headers['x-gw-error-code']]).toEqual([404, 'api_inactive']);
    const body = (await explain(sidecar, keyHash(raw), { api_id: api.api_id })).json();
    expect(body).toMatchObject({ outcome: 'api_inactive', refused_by: null, answer: { status: 404, code: 'api_inactive' }, limits: [], quota: null });
    await client(kubeConfig()).create('Key', namespace, { metadata: { name: 'key-inactive-api' }, spec: { key_hash: keyHash(raw) } });
    const flags = ['key-inactive-api', '-n', namespace, '--api', api.api_id, '--admin-url', sidecar.adminUrl, '--kubeconfig', testEnv().kubeconfig];
    const shown = await kubectlGw(['limits', ...flags], { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(shown.split('\n')).toEqual([
      `Key ${namespace}/key-inactive-api on API ${api.api_id}, GET /${api.api_id}/: a request now is refused by the API (not active): 404 api_inactive`,
      '',
      'The API is not active: the gateway refuses every request to it before any key or limit.',
      '',
    ]);
  });

  it('answers bad input in the gateway operations\' error shape, with a stable code', async () => {
    const api = await deploy({ api_limit: { rate: 5, per: PER } });
    const raw = await storeSession(redis, { rate: 5, per: PER, access_rights: { [api.api_id]: right(api.api_id) } });
    const hash = keyHash(raw);
    const cases: [string, Promise<CallResult>, number, string][] = [
      ['wrong admin secret', explain(sidecar, hash, { api_id: api.api_id }, 'nope'), 403, 'gateway_key_invalid'],
      ['a raw key instead of its hash', explain(sidecar, raw, { api_id: api.api_id }), 400, 'param_invalid'],
      ['no api_id', explain(sidecar, hash, {}), 400, 'query_invalid'],
      ['an API not loaded here', explain(sidecar, hash, { api_id: 'no-such-api' }), 404, 'api_not_found'],
      ['a path outside the API', explain(sidecar, hash, { api_id: api.api_id, path: '/elsewhere/' }), 400, 'query_invalid'],
      ['a bad method', explain(sidecar, hash, { api_id: api.api_id, method: 'GE T' }), 400, 'query_invalid'],
      ['a method the proxy refuses', explain(sidecar, hash, { api_id: api.api_id, method: 'BREW' }), 400, 'query_invalid'],
      ['an unknown key', explain(sidecar, 'a'.repeat(64), { api_id: api.api_id }), 404, 'key_not_found'],
    ];
    for (const [what, pending, status, code] of cases) {
      const res = await pending;
      expect([what, res.status, res.headers['x-gw-error-code']]).toEqual([what, status, code]);
      expect(res.json()).toEqual({ status: 'error', message: expect.any(String) });
    }
    const repeated = await call(`${sidecar.adminUrl}/gw/keys/${hash}/limits?api_id=${api.api_id}&api_id=x`, { headers: { 'x-gw-authorization': ADMIN_SECRET } });
    expect([repeated.status, repeated.headers['x-gw-error-code']]).toEqual([400, 'query_invalid']);
  });
});

describe('GET /gw/keys/{keyHash}/limits: the quota', () => {
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  let redis: Redis;
  let namespace: string;

  beforeAll(async () => {
    namespace = await createNamespace('sc-key-quota');
    upstream = await startEchoUpstream();
    redis = newRedis();
    sidecar = await startTestSidecar(sidecarOptions(namespace));
    const api = compiledApi('quota-api', upstream.url, { keyless: false, api_limit: { rate: 100, per: PER } });
    await deployApi(sidecar, namespace, api, { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'quotas' });
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
    redis?.disconnect();
  });

  it('a request refused by the quota: the read names the quota, with the 403\'s own figures', async () => {
    const raw = await storeSession(redis, { rate: 100, per: PER, quota_max: 2, quota_renewal_rate: 3600, access_rights: { 'quota-api': right('quota-api') } });
    const url = `${sidecar.proxyUrl}/quota-api/`;
    let refused: CallResult | undefined;
    for (let i = 0; i < 3; i++) refused = await call(url, { headers: { authorization: raw } });
    expect([refused!.status, refused!.json().error]).toEqual([403, 'Quota exceeded']);

    const body = (await explain(sidecar, keyHash(raw), { api_id: 'quota-api' })).json();
    expect(body).toMatchObject({ outcome: 'quota_exceeded', refused_by: 'quota', answer: { status: 403, code: 'quota_exceeded' } });
    const quota = body.quota as { max: number; used: number; remaining: number; reset: number; renewal: number };
    expect({ limit: quota.max, remaining: quota.remaining, reset: quota.reset }).toEqual(rateHeaders(refused!));
    expect([quota.used, quota.renewal]).toEqual([2, 3600]);
    // The rate limits passed; the refused request was given back to them.
    expect(body.limits).toMatchObject([
      { level: 'api', count: 2, remaining: 98 },
      { level: 'key_global', source: { kind: 'Key' }, count: 2, remaining: 98 },
    ]);

    await client(kubeConfig()).create('Key', namespace, { metadata: { name: 'quota-key' }, spec: { key_hash: keyHash(raw) } });
    const flags = ['quota-key', '-n', namespace, '--api', 'quota-api', '--admin-url', sidecar.adminUrl, '--kubeconfig', testEnv().kubeconfig];
    const shown = await kubectlGw(['limits', ...flags], { GW_ADMIN_SECRET: ADMIN_SECRET });
    expect(shown.split('\n')[0]).toBe(`Key ${namespace}/quota-key on API quota-api, GET /quota-api/: a request now is refused by quota: 403 quota_exceeded`);
    // It renews in an hour: RESET reads as kubectl ages read.
    expect(shown).toMatch(/^quota\s+Key\/\S*\s+-\s+-\s+2\s+2\s+0\s+(59|60)m$/m);
  });
});
