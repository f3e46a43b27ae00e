import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile, type ApiDefinitionInput, type PolicyInput } from '../../../crds/compile/index.ts';
import type { KindName } from '../../../crds/kinds.ts';
import { kinds } from '../../../crds/kinds.ts';
import { createNamespace, kubectl } from '../../harness/index.ts';

const proxy = { listen_path: '/x/', target_url: 'http://127.0.0.1:9000' };
const oas = {
  openapi: '3.0.3',
  info: { title: 't', version: '1' },
  paths: { '/items/{id}': { get: { operationId: 'getItem' } } },
  'x-gw-api-gateway': { server: { listenPath: { value: '/o/' } }, upstream: { url: 'http://127.0.0.1:9000' } },
};
const smoothing = { enabled: true, threshold: 5, step: 1, trigger: 0.5, delay: 1 };

function manifest(kind: KindName, name: string, spec: unknown): string {
  return JSON.stringify({ apiVersion: 'gw.dev/v1alpha1', kind, metadata: { name }, spec });
}

async function apply(namespace: string, kind: KindName, name: string, spec: unknown) {
  return kubectl(['apply', '-n', namespace, '-f', '-'], { input: manifest(kind, name, spec), allowFail: true });
}

describe('invalid resources on the real API server', () => {
  let namespace: string;
  beforeAll(async () => {
    namespace = await createNamespace('crd-invalid');
  });
  // Left behind, these APIs would share the cluster with later test files (fixed api_ids, listen paths).
  afterAll(async () => {
    await kubectl(['delete', 'gw', '--all', '-n', namespace, '--wait=false']);
  });

  it.each<[string, KindName, unknown, string[]]>([
    ['rate of the wrong type', 'ApiDefinition', { proxy, global_rate_limit: { rate: 'ten', per: 1 } }, ['spec.global_rate_limit.rate', 'integer']],
    ['per 0 with a rate', 'ApiDefinition', { proxy, global_rate_limit: { rate: 10, per: 0 } }, ['spec.global_rate_limit.per', 'per must be greater than 0']],
    ['negative per', 'ApiDefinition', { proxy, global_rate_limit: { rate: 10, per: -5 } }, ['spec.global_rate_limit.per', 'greater than or equal to 0']],
    ['rate without per', 'ApiDefinition', { proxy, global_rate_limit: { rate: 10 } }, ['spec.global_rate_limit', 'rate and per must be set together']],
    ['endpoint per 0', 'ApiDefinition', { proxy, extended_paths: { rate_limit: [{ path: '/a', method: 'GET', rate: 1, per: 0 }] } }, ['spec.extended_paths.rate_limit[0].per']],
    ['an unknown method', 'ApiDefinition', { proxy, extended_paths: { rate_limit: [{ path: '/a', method: 'FETCH', rate: 1, per: 1 }] } }, ['spec.extended_paths.rate_limit[0].method', 'Unsupported value']],
    ['classic and oas together', 'ApiDefinition', { proxy, oas }, ['spec', 'oas cannot be combined with the classic fields']],
    ['neither classic nor oas', 'ApiDefinition', { name: 'x' }, ['spec', 'set either proxy']],
    ['an oversized listen path', 'ApiDefinition', { proxy: { ...proxy, listen_path: `/${'a'.repeat(2000)}` } }, ['spec.proxy.listen_path', 'Too long']],
    ['an oversized category list', 'ApiDefinition', { proxy, categories: Array.from({ length: 100 }, (_, i) => `c${i}`) }, ['spec.categories', 'Too many']],
    ['an api_id with a slash', 'ApiDefinition', { proxy, api_id: '../etc' }, ['spec.api_id']],
    ['a target that is not http', 'ApiDefinition', { proxy: { ...proxy, target_url: 'not a url' } }, ['spec.proxy.target_url']],
    ['an ftp target', 'ApiDefinition', { proxy: { ...proxy, target_url: 'ftp://127.0.0.1:21' } }, ['spec.proxy.target_url', 'should match']],
    ['a target naming a user', 'ApiDefinition', { proxy: { ...proxy, target_url: 'http://svc:s3cret@127.0.0.1:9000' } }, ['spec.proxy.target_url', 'should match']],
    ['an OAS per that is not a duration', 'ApiDefinition', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { rate: 1, per: '10 seconds' } } } } }, ['spec.oas.x-gw-api-gateway.upstream.rateLimit.per']],
    ['a stream interval without its unit', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a', local: { interval: '1' } }] }, ['spec.rate_limit_resources[0].local.interval', 'should match']],
    ['a stream interval of 0s', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a', local: { interval: '0s' } }] }, ['spec.rate_limit_resources[0].local.interval', 'interval must be at least 1ms and at most 8760h']],
    ['a stream interval under 1ms', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a', local: { interval: '500us' } }] }, ['spec.rate_limit_resources[0].local.interval', 'at least 1ms']],
    ['a stream interval over a year', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a', local: { interval: '8760h1s' } }] }, ['spec.rate_limit_resources[0].local.interval', 'at most 8760h']],
    ['an OAS per of 0s with a rate', 'ApiDefinition', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { rate: 1, per: '0s' } } } } }, ['spec.oas.x-gw-api-gateway.upstream.rateLimit.per', 'per must be at least 1ms']],
    ['an OAS operation per of 0ms with a rate', 'ApiDefinition', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], middleware: { operations: { getItem: { rateLimit: { rate: 1, per: '0ms' } } } } } } }, ['spec.oas.x-gw-api-gateway.middleware.operations[getItem].rateLimit.per', 'per must be at least 1ms']],
    ['an OAS operation per of 100ns with a rate', 'ApiDefinition', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], middleware: { operations: { getItem: { rateLimit: { rate: 2, per: '100ns' } } } } } } }, ['spec.oas.x-gw-api-gateway.middleware.operations[getItem].rateLimit.per', 'per must be at least 1ms']],
    ['smoothing on an OAS operation\'s limit, which has none', 'ApiDefinition', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], middleware: { operations: { getItem: { rateLimit: { rate: 6, per: '10s', smoothing } } } } } } }, ['unknown field "spec.oas.x-gw-api-gateway.middleware.operations.getItem.rateLimit.smoothing"']],
    ['duplicate stream labels', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a' }, { label: 'a' }] }, ['spec.rate_limit_resources[1]', 'Duplicate value']],
    ['smoothing trigger 0', 'Policy', { rate: 10, per: 1, smoothing: { ...smoothing, trigger: 0 } }, ['spec.smoothing.trigger', 'greater than 0']],
    ['smoothing threshold above rate', 'Policy', { rate: 4, per: 1, smoothing }, ['spec.smoothing.threshold', 'must not exceed rate']],
    ['enabled smoothing without its numbers', 'Policy', { rate: 4, per: 1, smoothing: { enabled: true } }, ['spec.smoothing.threshold', 'threshold must be set, at least 1, when smoothing is enabled', 'spec.smoothing.delay']],
    ['a smoothing delay over a year', 'Key', { rate: 4, per: 1, smoothing: { ...smoothing, threshold: 2, delay: 31_536_001 } }, ['spec.smoothing.delay', 'less than or equal to 31536000']],
    ['enabled smoothing on a key with step 0', 'Key', { rate: 4, per: 1, smoothing: { ...smoothing, threshold: 2, step: 0 } }, ['spec.smoothing.step', 'step must be set, at least 1']],
    ['an access right keyed by another api_id', 'Policy', { access_rights: { a: { api_id: 'b' } } }, ['spec.access_rights', 'keyed by its own api_id']],
    ['a per-API limit per 0', 'Policy', { access_rights: { a: { limit: { rate: 3, per: 0 } } } }, ['spec.access_rights[a].limit.per', 'per must be greater than 0']],
    ['a key_hash that is not a SHA-256', 'Key', { key_hash: 'not-a-hash' }, ['spec.key_hash']],
    ['a key rate of the wrong type', 'Key', { rate: '5', per: 1 }, ['spec.rate', 'integer']],
    ['a policy rate_limit_pattern that is not a string', 'Policy', { meta_data: { rate_limit_pattern: 5 } }, ['spec.meta_data.rate_limit_pattern', 'string']],
    ['a key rate_limit_pattern that is not a string', 'Key', { apply_policies: ['gold'], meta_data: { rate_limit_pattern: 123 } }, ['spec.meta_data.rate_limit_pattern', 'string']],
    ['a key rate_limit_pattern that is a list', 'Key', { apply_policies: ['gold'], meta_data: { rate_limit_pattern: ['$gw_meta.org'] } }, ['spec.meta_data.rate_limit_pattern', 'string']],
    ['too many applied policies', 'Key', { apply_policies: Array.from({ length: 40 }, (_, i) => `p${i}`) }, ['spec.apply_policies', 'Too many']],
    ['a policy granting a path', 'Policy', { access_rights: { '../orders': {} } }, ['spec.access_rights', 'keyed by an api_id']],
    ['a policy name with a path', 'Key', { apply_policies: ['gold', '../kube-system/admin'] }, ['spec.apply_policies[1]']],
    ['an alias with a terminal escape', 'Key', { alias: 'ops\u001b[2J' }, ['spec.alias']],
    ['duplicate product tags', 'PortalProduct', { tags: [{ Name: 'a' }, { Name: 'a' }] }, ['spec.tags[1]', 'Duplicate value']],
    ['an oversized category name', 'Category', { name: 'n'.repeat(200) }, ['spec.name', 'Too long']],
  ])('rejects %s, naming the field, and creates nothing', async (label, kind, spec, expected) => {
    const name = `bad-${label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`.slice(0, 60).replace(/-$/, '');
    const result = await apply(namespace, kind, name, spec);
    expect(result.code).not.toBe(0);
    for (const text of expected) expect(result.stderr).toContain(text);
    const get = await kubectl(['get', kinds[kind].plural, name, '-n', namespace], { allowFail: true });
    expect(get.stderr).toContain('NotFound');
  });

  it.each<[KindName, unknown]>([
    ['ApiDefinition', { proxy }],
    ['Key', {}],
  ])('rejects a %s whose name leaves no room for the object named after it', async (kind, spec) => {
    const name = `long-${'n'.repeat(242)}`;
    const result = await apply(namespace, kind, name, spec);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('metadata.name');
    expect(result.stderr).toContain('may not be more than 246');
    expect((await kubectl(['get', kinds[kind].plural, name, '-n', namespace], { allowFail: true })).stderr).toContain('NotFound');
    // One character shorter, it is taken.
    expect((await apply(namespace, kind, name.slice(1), spec)).stderr).toBe('');
  });

  it.each<[string, KindName, unknown, string, string]>([
    ['a negative smoothing step', 'Policy', { rate: 10, per: 1, smoothing: { ...smoothing, step: -1 } }, 'spec.smoothing.step', 'step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative smoothing step, switched off', 'Policy', { rate: 10, per: 1, smoothing: { enabled: false, step: -1 } }, 'spec.smoothing.step', 'step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative smoothing threshold', 'Key', { rate: 10, per: 1, smoothing: { ...smoothing, threshold: -1 } }, 'spec.smoothing.threshold', 'threshold must be set, at least 1, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative smoothing trigger', 'Key', { rate: 10, per: 1, smoothing: { ...smoothing, trigger: -1 } }, 'spec.smoothing.trigger', 'trigger must be set, greater than 0, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative stream count', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a', local: { count: -1 } }] }, 'spec.rate_limit_resources[0].local.count', 'should be greater than or equal to 1'],
    ['a stream count of 0', 'ApiDefinition', { proxy, rate_limit_resources: [{ label: 'a', local: { count: 0 } }] }, 'spec.rate_limit_resources[0].local.count', 'should be greater than or equal to 1'],
  ])('rejects %s with one message, naming the bound that applies', async (label, kind, spec, field, message) => {
    const name = `one-${label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`.slice(0, 60).replace(/-$/, '');
    const result = await apply(namespace, kind, name, spec);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(message);
    // Named once: a field minimum of 0 beside the real bound would be a second error on it.
    expect(result.stderr.split(`${field}:`).length - 1, result.stderr).toBe(1);
  });

  it.each([
    ['enabled: false alone', { enabled: false }],
    ['switched off with zeros, as create-key answers it', { enabled: false, threshold: 0, step: 0, trigger: 0, delay: 0 }],
    ['switched off with a threshold above rate', { enabled: false, threshold: 50, step: 1, trigger: 0.5, delay: 1 }],
  ])('accepts a Policy and a Key whose smoothing is off: %s', async (label, off) => {
    const name = `off-${label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`.slice(0, 50).replace(/-$/, '');
    for (const kind of ['Policy', 'Key'] as const) {
      const result = await apply(namespace, kind, name, { rate: 4, per: 1, smoothing: off, access_rights: { a: { limit: { rate: 4, per: 1, smoothing: off } } } });
      expect(result.stderr).toBe('');
      const stored = JSON.parse((await kubectl(['get', kinds[kind].plural, name, '-n', namespace, '-o', 'json'])).stdout);
      expect(stored.spec.smoothing).toEqual(off);
    }
  });

  it.each([
    ['a stream interval of exactly 1ms', { proxy, rate_limit_resources: [{ label: 'a', local: { interval: '1ms' } }] }, 'spec.rate_limit_resources.0.local.interval', '1ms'],
    ['a stream interval of exactly 8760h', { proxy, rate_limit_resources: [{ label: 'a', local: { interval: '8760h' } }] }, 'spec.rate_limit_resources.0.local.interval', '8760h'],
    ['an OAS per of 0s with rate 0 (no limit)', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { rate: 0, per: '0s' } } } } }, 'spec.oas.x-gw-api-gateway.upstream.rateLimit.per', '0s'],
    ['an OAS per of 0s on a switched-off limit', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { enabled: false, rate: 5, per: '0s' } } } } }, 'spec.oas.x-gw-api-gateway.upstream.rateLimit.per', '0s'],
  ])('accepts %s', async (label, spec, path, stored) => {
    const name = `ok-${label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`.slice(0, 50).replace(/-$/, '');
    const result = await apply(namespace, 'ApiDefinition', name, spec);
    expect(result.stderr).toBe('');
    const object = JSON.parse((await kubectl(['get', 'gwapi', name, '-n', namespace, '-o', 'json'])).stdout);
    expect(path.split('.').reduce<unknown>((at, key) => (at as Record<string, unknown>)[key], object)).toBe(stored);
  });

  it('rejects an invalid update and leaves the stored object as it was', async () => {
    const good = { proxy, global_rate_limit: { rate: 5, per: 10 } };
    expect((await apply(namespace, 'ApiDefinition', 'stays-valid', good)).code).toBe(0);
    const before = JSON.parse((await kubectl(['get', 'gwapi', 'stays-valid', '-n', namespace, '-o', 'json'])).stdout);
    const result = await apply(namespace, 'ApiDefinition', 'stays-valid', { ...good, global_rate_limit: { rate: 5, per: 0 } });
    expect(result.code).not.toBe(0);
    const after = JSON.parse((await kubectl(['get', 'gwapi', 'stays-valid', '-n', namespace, '-o', 'json'])).stdout);
    expect(after.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
    expect(after.spec.global_rate_limit).toEqual({ rate: 5, per: 10 });
  });
});

describe('resources the schema cannot judge: accepted, then reported by the compile step', () => {
  let namespace: string;
  beforeAll(async () => {
    namespace = await createNamespace('crd-compile');
  });
  // Left behind, these APIs would share the cluster with later test files (fixed api_ids, listen paths).
  afterAll(async () => {
    await kubectl(['delete', 'gw', '--all', '-n', namespace, '--wait=false']);
  });

  it.each<[string, { apis: [string, unknown][]; policies?: [string, unknown][] }, string, string]>([
    ['a path that is not a valid regex', { apis: [['bad-regex', { proxy, extended_paths: { rate_limit: [{ path: '/users/(', method: 'GET', rate: 1, per: 1 }] } }]] }, 'bad-regex', 'InvalidRegex'],
    ['an unknown operationId', { apis: [['unknown-op', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], middleware: { operations: { nope: { rateLimit: { rate: 1, per: '1s' } } } } } } }]] }, 'unknown-op', 'UnknownOperation'],
    ['an unknown stream label', { apis: [['no-label', { proxy: { ...proxy, rate_limit: 'missing' } }]] }, 'no-label', 'UnknownRateLimitResource'],
    ['a policy granting a missing API', { apis: [], policies: [['grants-nothing', { access_rights: { 'no-such-api': {} } }]] }, 'grants-nothing', 'MissingApi'],
    [
      'a key-level limit on an ignored endpoint',
      {
        apis: [['open-api', { api_id: 'open-api', proxy, extended_paths: { ignored: [{ path: '/public', method: 'GET' }] } }]],
        policies: [['limits-open', { access_rights: { 'open-api': { endpoints: [{ path: '/public', methods: [{ name: 'GET', limit: { rate: 1, per: 1 } }] }] } } }]],
      },
      'limits-open',
      'IgnoredEndpointWithKeyLimit',
    ],
  ])('%s', async (_label, resources, name, reason) => {
    for (const [n, spec] of resources.apis) expect((await apply(namespace, 'ApiDefinition', n, spec)).code).toBe(0);
    for (const [n, spec] of resources.policies ?? []) expect((await apply(namespace, 'Policy', n, spec)).code).toBe(0);
    const apis = JSON.parse((await kubectl(['get', 'apidefinitions', '-n', namespace, '-o', 'json'])).stdout).items as ApiDefinitionInput[];
    const policies = JSON.parse((await kubectl(['get', 'policies', '-n', namespace, '-o', 'json'])).stdout).items as PolicyInput[];
    const { problems } = compile({ apiDefinitions: apis, policies });
    expect(problems).toContainEqual(expect.objectContaining({ reason, ref: expect.objectContaining({ name, namespace }) }));
  });
});
