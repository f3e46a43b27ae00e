import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { api as compiledApi } from '../../test/support/compiled-fixtures.ts';
import { compiledConfigSchema, type CompiledApi, type CompiledConfig } from '../compiled.ts';
import { ApiCompileCache, compile, compileForApi, defaultApiId, type ApiDefinitionInput, type CompileInput, type PolicyInput } from './index.ts';

const target = 'http://127.0.0.1:9000';

function api(name: string, spec: ApiDefinitionInput['spec'], namespace = 'ns'): ApiDefinitionInput {
  return { metadata: { name, namespace, uid: `uid-${name}` }, spec };
}
function classic(name: string, extra: Partial<ApiDefinitionInput['spec']> = {}, namespace = 'ns'): ApiDefinitionInput {
  return api(name, { api_id: name, proxy: { listen_path: `/${name}/`, target_url: target }, ...extra }, namespace);
}
function oasApi(name: string, doc: Record<string, unknown>, gw: Record<string, unknown> = {}): ApiDefinitionInput {
  return api(name, {
    api_id: name,
    oas: {
      openapi: '3.0.3',
      info: { title: `${name} title`, version: '1' },
      paths: {},
      ...doc,
      'x-gw-api-gateway': { server: { listenPath: { value: `/${name}/` } }, upstream: { url: target }, ...gw },
    },
  } as ApiDefinitionInput['spec']);
}
function policy(name: string, spec: PolicyInput['spec'], namespace = 'ns'): PolicyInput {
  return { metadata: { name, namespace }, spec };
}

/** Compiles, checks the output against the contract the sidecar loads, and returns it. */
function run(input: Partial<CompileInput>) {
  const result = compile({ apiDefinitions: [], policies: [], ...input });
  expect(compiledConfigSchema.parse(result.config)).toEqual(result.config);
  return result;
}
function onlyApi(config: CompiledConfig): CompiledApi {
  expect(config.apis).toHaveLength(1);
  return config.apis[0]!;
}
/** The first endpoint rule that matches, as the sidecar evaluates them (first match wins). */
function firstMatch<R extends { pattern: string; method: string }>(rules: R[], method: string, path: string): R | undefined {
  return rules.find((r) => (r.method === '*' || r.method === method) && new RegExp(r.pattern).test(path));
}

describe('compile: classic ApiDefinitions', () => {
  it('applies every default', () => {
    const { config, problems } = run({ apiDefinitions: [{ metadata: { name: 'plain' }, spec: { proxy: { listen_path: '/p/', target_url: target } } }] });
    expect(problems).toEqual([]);
    const expectedId = createHash('sha256').update('default/plain').digest('hex').slice(0, 24);
    expect(defaultApiId('default', 'plain')).toBe(expectedId);
    expect(onlyApi(config)).toEqual(
      compiledApi(expectedId, { name: 'plain', source: { kind: 'ApiDefinition', namespace: 'default', name: 'plain' }, listen_path: '/p/', target_url: target }),
    );
    expect(config.settings.rate_limit_response_headers).toBe('quotas');
  });

  it('gives same-named APIs of different namespaces different default ids', () => {
    expect(defaultApiId('a', 'x')).not.toBe(defaultApiId('b', 'x'));
    expect(defaultApiId('a', 'x')).toMatch(/^[0-9a-f]{24}$/);
  });

  it.each([
    ['a limit', { global_rate_limit: { rate: 5, per: 10 } }, { rate: 5, per: 10 }],
    ['no global_rate_limit', {}, null],
    ['disable_rate_limit', { global_rate_limit: { rate: 5, per: 10 }, disable_rate_limit: true }, null],
    ['rate and per both 0', { global_rate_limit: { rate: 0, per: 0 } }, null],
    ['disable_rate_limit false', { global_rate_limit: { rate: 1, per: 1 }, disable_rate_limit: false }, { rate: 1, per: 1 }],
  ])('API-level limit with %s', (_name, extra, expected) => {
    const { config, problems } = run({ apiDefinitions: [classic('a', extra)] });
    expect(problems).toEqual([]);
    expect(onlyApi(config).api_limit).toEqual(expected);
  });

  it('keeps per-endpoint rules in array order, so the first match wins', () => {
    const { config } = run({
      apiDefinitions: [
        classic('a', {
          extended_paths: {
            rate_limit: [
              { path: '/anything/slow', method: 'GET', rate: 2, per: 10 },
              { path: '/anything/off', method: 'GET', rate: 2, per: 10, enabled: false },
              { path: '/anything/zero', method: 'GET', rate: 0, per: 0 },
              { path: '/anything/.*', method: '*', rate: 20, per: 10 },
              { path: '/users/{id}', method: 'DELETE', rate: 1, per: 60 },
            ],
          },
        }),
      ],
    });
    const rules = onlyApi(config).endpoint_limits;
    expect(rules.map((r) => [r.path, r.pattern, r.method, r.rate, r.per])).toEqual([
      ['/anything/slow', '^(?:/anything/slow)$', 'GET', 2, 10],
      ['/anything/.*', '^(?:/anything/.*)$', '*', 20, 10],
      ['/users/{id}', '^(?:/users/(.*))$', 'DELETE', 1, 60],
    ]);
    expect(firstMatch(rules, 'GET', '/anything/slow')?.rate).toBe(2);
    expect(firstMatch(rules, 'POST', '/anything/slow')?.rate).toBe(20);
    expect(firstMatch(rules, 'GET', '/anything/off')?.rate).toBe(20);
    expect(firstMatch(rules, 'DELETE', '/users/42')?.rate).toBe(1);
    expect(firstMatch(rules, 'GET', '/users/42')).toBeUndefined();
    expect(firstMatch(rules, 'GET', '/prefix/anything/slow')).toBeUndefined();
  });

  it('turns the API-level per-endpoint limits off with disable_rate_limit, still refusing a bad rule', () => {
    const rate_limit = [{ path: '/ep', method: 'GET' as const, rate: 1, per: 60 }];
    const off = run({ apiDefinitions: [classic('a', { disable_rate_limit: true, global_rate_limit: { rate: 1, per: 60 }, extended_paths: { rate_limit } })] });
    expect(off.problems).toEqual([]);
    expect(onlyApi(off.config)).toMatchObject({ api_limit: null, endpoint_limits: [] });
    const badRule = run({ apiDefinitions: [classic('a', { disable_rate_limit: true, extended_paths: { rate_limit: [{ ...rate_limit[0]!, path: '/ep(' }] } })] });
    expect(badRule.problems.map((p) => p.reason)).toEqual(['InvalidRegex']);
  });

  it('ignores extended_paths when use_extended_paths is false, and uses them when it is left out', () => {
    const extended_paths = { rate_limit: [{ path: '/x', method: 'GET' as const, rate: 1, per: 1 }], ignored: [{ path: '/open' }] };
    const off = run({ apiDefinitions: [classic('a', { use_extended_paths: false, extended_paths })] });
    expect(onlyApi(off.config)).toMatchObject({ endpoint_limits: [], ignored: [] });
    const unset = run({ apiDefinitions: [classic('a', { extended_paths })] });
    expect(onlyApi(unset.config).endpoint_limits).toHaveLength(1);
    expect(onlyApi(unset.config).ignored).toEqual([{ path: '/open', pattern: '^(?:/open)$', method: '*' }]);
  });

  it('reports a path that is not a valid regex and leaves that API out, keeping the others', () => {
    const { config, problems } = run({
      apiDefinitions: [
        classic('bad', { extended_paths: { rate_limit: [{ path: '/ok', method: 'GET', rate: 1, per: 1 }, { path: '/users/(', method: 'GET', rate: 1, per: 1 }] } }),
        classic('bad-ignored', { extended_paths: { ignored: [{ path: '/[a-' }] } }),
        classic('good'),
      ],
    });
    expect(config.apis.map((a) => a.api_id)).toEqual(['good']);
    expect(problems).toEqual([
      {
        ref: { kind: 'ApiDefinition', namespace: 'ns', name: 'bad', uid: 'uid-bad' },
        field: 'spec.extended_paths.rate_limit[1].path',
        reason: 'InvalidRegex',
        message: expect.stringContaining('"/users/("'),
      },
      expect.objectContaining({ field: 'spec.extended_paths.ignored[0].path', reason: 'InvalidRegex' }),
    ]);
  });

  it('resolves the stream rate-limit resource with its defaults', () => {
    const { config } = run({
      apiDefinitions: [
        classic('a', { proxy: { listen_path: '/a/', target_url: target, rate_limit: 'guard' }, rate_limit_resources: [{ label: 'other', local: { count: 5 } }, { label: 'guard' }] }),
        classic('b', { proxy: { listen_path: '/b/', target_url: target, rate_limit: 'fast' }, rate_limit_resources: [{ label: 'fast', local: { count: 7, interval: '250ms' } }] }),
        classic('c', { rate_limit_resources: [{ label: 'unused' }] }),
      ],
    });
    expect(config.apis.map((a) => a.stream_limit)).toEqual([
      { label: 'guard', count: 1000, interval_ms: 1000 },
      { label: 'fast', count: 7, interval_ms: 250 },
      null,
    ]);
  });

  it.each([
    ['an unknown label', { label: 'guard', resources: [{ label: 'other' }] }, 'spec.proxy.rate_limit', 'UnknownRateLimitResource'],
    // The schema's bounds, which an object stored before them (or a folder file) meets here.
    ['a zero interval', { label: 'guard', resources: [{ label: 'guard', local: { interval: '0s' } }] }, 'spec.rate_limit_resources.0.local.interval', 'InvalidSpec'],
    ['an interval below 1ms', { label: 'guard', resources: [{ label: 'guard', local: { interval: '10us' } }] }, 'spec.rate_limit_resources.0.local.interval', 'InvalidSpec'],
    ['an interval over 8760h', { label: 'guard', resources: [{ label: 'guard', local: { interval: '8761h' } }] }, 'spec.rate_limit_resources.0.local.interval', 'InvalidSpec'],
    // Under two bounds at once (every count's 0 and the stream's 1): said once.
    ['a count of -1', { label: 'guard', resources: [{ label: 'guard', local: { count: -1 } }] }, 'spec.rate_limit_resources.0.local.count', 'InvalidSpec'],
  ])('reports a stream resource with %s', (_name, { label, resources }, field, reason) => {
    const { config, problems } = run({
      apiDefinitions: [classic('a', { proxy: { listen_path: '/a/', target_url: target, rate_limit: label }, rate_limit_resources: resources })],
    });
    expect(config.apis).toEqual([]);
    expect(problems).toEqual([expect.objectContaining({ field, reason })]);
  });

  it('compiles smoothing of the API-level limit, keeps it where there is no rate to smooth, and drops disabled smoothing', () => {
    const smoothing = { enabled: true, threshold: 2, step: 1, trigger: 0.5, delay: 3 };
    const { config } = run({
      apiDefinitions: [
        classic('on', { global_rate_limit: { rate: 10, per: 1, smoothing } }),
        classic('off', { global_rate_limit: { rate: 10, per: 1, smoothing: { ...smoothing, enabled: false } } }),
        classic('nolimit', { global_rate_limit: { rate: 10, per: 1, smoothing }, disable_rate_limit: true }),
        classic('zero', { global_rate_limit: { rate: 0, per: 0, smoothing } }),
      ],
    });
    // Without a rate it smooths nothing: the limits read shows it as unused (docs/behaviour.md#smoothing).
    expect(config.apis.map((a) => [a.api_id, a.api_limit, a.smoothing])).toEqual([
      ['nolimit', null, smoothing],
      ['off', { rate: 10, per: 1 }, null],
      ['on', { rate: 10, per: 1 }, smoothing],
      ['zero', null, smoothing],
    ]);
  });

  it('copies auth, state, categories (deduplicated) and names', () => {
    const { config } = run({
      apiDefinitions: [
        classic('a', { name: 'Shown', use_keyless: true, auth: { auth_header_name: 'X-Key' }, state: { active: false }, categories: ['x', 'y', 'x'] }),
      ],
    });
    expect(onlyApi(config)).toMatchObject({ name: 'Shown', keyless: true, auth_header_name: 'X-Key', active: false, categories: ['x', 'y'] });
  });

  it('keeps the first ApiDefinition (by namespace/name) of a duplicated api_id and reports the others', () => {
    const { config, problems } = run({ apiDefinitions: [classic('z', { api_id: 'same' }, 'b'), classic('y', { api_id: 'same' }, 'a')] });
    expect(onlyApi(config).source).toMatchObject({ namespace: 'a', name: 'y' });
    expect(problems).toEqual([
      { ref: expect.objectContaining({ namespace: 'b', name: 'z' }), field: 'spec.api_id', reason: 'DuplicateApiId', message: 'api_id "same" is already used by ApiDefinition a/y' },
    ]);
  });

  it('reports resources without a spec instead of failing', () => {
    const noSpec = { metadata: { name: 'empty', namespace: 'ns' } } as ApiDefinitionInput;
    const noPolicySpec = { metadata: { name: 'p', namespace: 'ns' } } as PolicyInput;
    const input = { apiDefinitions: [noSpec], policies: [noPolicySpec] };
    const { config, problems } = run(input);
    expect(config.apis).toEqual([]);
    expect(problems.map((p) => [p.ref.kind, p.field, p.reason])).toEqual([
      ['ApiDefinition', 'spec', 'InvalidSpec'],
      ['Policy', 'spec', 'InvalidSpec'],
    ]);
    // The Policy grants nothing, so it covers every API: its problem comes with each API's compile.
    expect(compileForApi(defaultApiId('ns', 'empty'), input).problems.map((p) => p.ref.kind)).toEqual(['ApiDefinition', 'Policy']);
  });

  it('lets the older ApiDefinition keep a duplicated api_id, whatever the names', () => {
    const older = { ...classic('z', { api_id: 'same' }, 'b'), metadata: { name: 'z', namespace: 'b', creationTimestamp: '2026-01-01T00:00:00Z' } };
    const newer = { ...classic('y', { api_id: 'same' }, 'a'), metadata: { name: 'y', namespace: 'a', creationTimestamp: new Date('2026-02-01T00:00:00Z') } };
    const { config, problems } = run({ apiDefinitions: [newer, older] });
    expect(onlyApi(config).source).toMatchObject({ namespace: 'b', name: 'z' });
    expect(problems).toEqual([expect.objectContaining({ reason: 'DuplicateApiId', ref: expect.objectContaining({ namespace: 'a', name: 'y' }) })]);
  });

  it('lets the ApiDefinition that served a duplicated api_id last keep it, whatever the names and ages', () => {
    const serving = classic('z', { api_id: 'same' }, 'b');
    const served = run({ apiDefinitions: [serving] }).config.apis;
    const newcomer = { ...classic('a', { api_id: 'same' }, 'a'), metadata: { name: 'a', namespace: 'a', creationTimestamp: '2020-01-01T00:00:00Z' } };
    const { config, problems } = run({ apiDefinitions: [newcomer, serving], lastGoodApis: served });
    expect(onlyApi(config).source).toMatchObject({ namespace: 'b', name: 'z' });
    expect(problems).toEqual([expect.objectContaining({ reason: 'DuplicateApiId', ref: expect.objectContaining({ namespace: 'a', name: 'a' }) })]);
  });

  it('gives a duplicated api_id to a valid ApiDefinition over an older or earlier-named one that can never be served', () => {
    const broken = { metadata: { name: 'a', namespace: 'a', creationTimestamp: '2020-01-01T00:00:00Z' }, spec: { api_id: 'same', proxy: { listen_pth: '/x/' } } } as unknown as ApiDefinitionInput;
    const { config, problems } = run({ apiDefinitions: [broken, classic('z', { api_id: 'same' }, 'b')] });
    expect(onlyApi(config).source).toMatchObject({ namespace: 'b', name: 'z' });
    expect(problems).toEqual([expect.objectContaining({ reason: 'DuplicateApiId', ref: expect.objectContaining({ namespace: 'a', name: 'a' }) })]);
  });

  it('counts an older ApiDefinition its schema passes but that does not compile (a bad regex) as one that can never be served', () => {
    const older = { metadata: { name: 'a9', namespace: 'a', creationTimestamp: '2020-01-01T00:00:00Z' }, spec: classic('a9', { api_id: 'same', extended_paths: { rate_limit: [{ path: '/z(', method: 'GET', enabled: true, rate: 2, per: 60 }] } }).spec };
    const newer = { ...classic('a10', { api_id: 'same' }, 'a'), metadata: { name: 'a10', namespace: 'a', creationTimestamp: '2020-02-01T00:00:00Z' } };
    const { config, problems } = run({ apiDefinitions: [older, newer] });
    expect(onlyApi(config).source).toMatchObject({ namespace: 'a', name: 'a10' });
    expect(problems).toEqual([expect.objectContaining({ reason: 'DuplicateApiId', ref: expect.objectContaining({ namespace: 'a', name: 'a9' }) })]);
    // Once it served, a bad edit of the holder keeps the api_id at its last good version (docs/behaviour.md#bad-edits).
    const kept = run({ apiDefinitions: [older, newer], lastGoodApis: run({ apiDefinitions: [classic('a9', { api_id: 'same' }, 'a')] }).config.apis });
    expect(kept.problems.map((p) => [p.ref.name, p.reason])).toEqual([['a9', 'InvalidRegex'], ['a10', 'DuplicateApiId']]);
    expect(kept.config.apis).toEqual([]);
  });

  it('reports a spec that bypassed the CRD with the field that is wrong', () => {
    const broken = { metadata: { name: 'x', namespace: 'ns' }, spec: { proxy: { listen_path: 'nope', target_url: target }, global_rate_limit: { rate: 5 } } };
    const { config, problems } = run({ apiDefinitions: [broken as ApiDefinitionInput] });
    expect(config.apis).toEqual([]);
    expect(problems.map((p) => [p.field, p.reason])).toEqual([
      ['spec.proxy.listen_path', 'InvalidSpec'],
      ['spec.global_rate_limit', 'InvalidSpec'],
      ['spec.global_rate_limit.per', 'InvalidSpec'],
    ]);
  });
});

describe('compile: OAS ApiDefinitions', () => {
  const paths = {
    '/items/{id}': { get: { operationId: 'getItem' }, delete: { operationId: 'deleteItem' }, parameters: [] },
    '/v1.0/items': { get: { operationId: 'listItems' }, summary: 'not an operation' },
    '/health': { get: { operationId: 'health' } },
  };

  it('resolves operationIds to path and method in the order of paths, placeholders as (.*)', () => {
    const { config, problems } = run({
      apiDefinitions: [
        oasApi('o', { paths }, {
          middleware: {
            operations: {
              listItems: { rateLimit: { rate: 10, per: '1m30s' } },
              health: { ignoreAuthentication: { enabled: true } },
              deleteItem: { rateLimit: { rate: 1, per: '500ms' } },
              getItem: { rateLimit: { rate: 3, per: '10s' } },
            },
          },
        }),
      ],
    });
    expect(problems).toEqual([]);
    const compiled = onlyApi(config);
    expect(compiled.endpoint_limits).toEqual([
      { path: '/items/{id}', pattern: '^(?:/items/(.*))$', method: 'GET', rate: 3, per: 10 },
      { path: '/items/{id}', pattern: '^(?:/items/(.*))$', method: 'DELETE', rate: 1, per: 0.5 },
      { path: '/v1.0/items', pattern: '^(?:/v1\\.0/items)$', method: 'GET', rate: 10, per: 90 },
    ]);
    expect(compiled.ignored).toEqual([{ path: '/health', pattern: '^(?:/health)$', method: 'GET' }]);
    expect(firstMatch(compiled.endpoint_limits, 'GET', '/items/a/b')?.rate).toBe(3);
    expect(firstMatch(compiled.endpoint_limits, 'GET', '/v1x0/items')).toBeUndefined();
  });

  it('takes identity, auth, state and the API-level limit from x-gw-api-gateway', () => {
    const { config } = run({
      apiDefinitions: [
        oasApi('o', {}, {
          info: { state: { active: false } },
          server: { listenPath: { value: '/o/', strip: false }, authentication: { enabled: true, header: { name: 'X-Api-Key' } } },
          upstream: { url: 'https://up.example:8443/base', rateLimit: { rate: 60, per: '1m' } },
        }),
        oasApi('keyless', {}, { upstream: { url: target, rateLimit: { enabled: false, rate: 60, per: '1m' } } }),
      ],
    });
    expect(config.apis.map((a) => [a.name, a.active, a.keyless, a.auth_header_name, a.listen_path, a.strip_listen_path, a.target_url, a.api_limit])).toEqual([
      ['keyless title', true, true, 'Authorization', '/keyless/', true, target, null],
      ['o title', false, false, 'X-Api-Key', '/o/', false, 'https://up.example:8443/base', { rate: 60, per: 60 }],
    ]);
  });

  it.each([
    ['an operationId missing from paths', { operations: { nope: { rateLimit: { rate: 1, per: '1s' } } } }, 'UnknownOperation', 'spec.oas.x-gw-api-gateway.middleware.operations.nope'],
    ['a zero per with a rate', { operations: { getItem: { rateLimit: { rate: 1, per: '0s' } } } }, 'InvalidSpec', 'spec.oas.x-gw-api-gateway.middleware.operations.getItem.rateLimit.per'],
    // A per-endpoint limit has no smoothing (docs/behaviour.md#smoothing): refused, not accepted and never applied.
    [
      'smoothing on an operation\'s limit',
      { operations: { getItem: { rateLimit: { rate: 6, per: '10s', smoothing: { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 1 } } } } },
      'UnknownField',
      'spec.oas.x-gw-api-gateway.middleware.operations["getItem"].rateLimit.smoothing',
    ],
  ])('reports %s and leaves the API out', (_name, middleware, reason, field) => {
    const { config, problems } = run({ apiDefinitions: [oasApi('o', { paths }, { middleware })] });
    expect(config.apis).toEqual([]);
    expect(problems).toEqual([expect.objectContaining({ reason, field, ref: expect.objectContaining({ name: 'o' }) })]);
  });

  it.each([
    ['an unclosed placeholder', '/items/{id', '"{" or "}"'],
    ['a closing brace alone', '/items/id}', '"{" or "}"'],
    ['an empty placeholder', '/items/{}', '"{" or "}"'],
    ['a path without its leading slash', 'items/{id}', 'must start with "/"'],
  ])('reports %s in an OAS path and leaves the API out', (_name, path, message) => {
    const middleware = { operations: { getItem: { rateLimit: { rate: 1, per: '1s' } } } };
    const { config, problems } = run({ apiDefinitions: [oasApi('o', { paths: { [path]: { get: { operationId: 'getItem' } } } }, { middleware })] });
    expect(config.apis).toEqual([]);
    expect(problems).toEqual([expect.objectContaining({ reason: 'InvalidPath', field: `spec.oas.paths["${path}"]`, message: expect.stringContaining(message) })]);
  });

  it('matches OAS paths and listen paths in the form requests arrive in', () => {
    const middleware = { operations: { getItem: { rateLimit: { rate: 1, per: '1s' } }, getCafe: { rateLimit: { rate: 2, per: '1s' } } } };
    const doc = { paths: { '/my items/{id}': { get: { operationId: 'getItem' } }, '/café': { get: { operationId: 'getCafe' } } } };
    const input = oasApi('o', doc, { middleware });
    (input.spec as { oas: { 'x-gw-api-gateway': { server: { listenPath: { value: string } } } } }).oas['x-gw-api-gateway'].server.listenPath.value = '/caf%c3%a9/';
    const { config, problems } = run({ apiDefinitions: [input] });
    expect(problems).toEqual([]);
    const compiled = onlyApi(config);
    expect(compiled.listen_path).toBe('/caf%C3%A9/');
    expect(firstMatch(compiled.endpoint_limits, 'GET', '/my%20items/1')).toMatchObject({ rate: 1 });
    expect(firstMatch(compiled.endpoint_limits, 'GET', '/caf%C3%A9')).toMatchObject({ rate: 2 });
  });

  it('refuses a classic endpoint path that no request path holds, saying what to write', () => {
    const { config, problems } = run({ apiDefinitions: [classic('c', { extended_paths: { rate_limit: [{ path: '/caf%c3%a9', method: 'GET', rate: 1, per: 60 }] } })] });
    expect(config.apis).toEqual([]);
    expect(problems).toEqual([expect.objectContaining({ reason: 'InvalidRegex', message: expect.stringContaining('holds "%c3", which no request path holds as the gateway matches it (docs/behaviour.md#endpoint-paths): write "%C3"') })]);
    const listen = run({ apiDefinitions: [api('l', { api_id: 'l', proxy: { listen_path: '/café/', target_url: target } })] });
    expect(onlyApi(listen.config).listen_path).toBe('/caf%C3%A9/');
  });

  it('skips specification extensions beside the OAS paths', () => {
    const { config, problems } = run({ apiDefinitions: [oasApi('o', { paths: { ...paths, 'x-owner': { team: 'a' } } })] });
    expect(problems).toEqual([]);
    expect(config.apis).toHaveLength(1);
  });

  it('reports an operationId used twice', () => {
    const { problems } = run({ apiDefinitions: [oasApi('o', { paths: { '/a': { get: { operationId: 'x' } }, '/b': { get: { operationId: 'x' } } } })] });
    expect(problems).toEqual([expect.objectContaining({ reason: 'DuplicateOperation', field: 'spec.oas.paths["/b"].get.operationId' })]);
  });

  it('drops disabled and rate-0 operation limits without a problem', () => {
    const { config, problems } = run({
      apiDefinitions: [oasApi('o', { paths }, { middleware: { operations: { getItem: { rateLimit: { enabled: false, rate: 3, per: '1s' } }, health: { rateLimit: { rate: 0, per: '0s' } } } } })],
    });
    expect(problems).toEqual([]);
    expect(onlyApi(config).endpoint_limits).toEqual([]);
  });
});

describe('compile: policies', () => {
  const apis = [
    classic('a', { extended_paths: { ignored: [{ path: '/public/.*', method: 'GET' }, { path: '/open', method: '*' }] } }),
    classic('b', { name: 'API B' }),
  ];

  it('compiles limits with defaults, per-API limits, per-endpoint limits, pattern and tags', () => {
    const smoothing = { enabled: true, threshold: 5, step: 2, trigger: 0.5, delay: 1 };
    const { config, problems } = run({
      apiDefinitions: apis,
      policies: [
        policy('gold', {
          rate: 100,
          per: 60,
          smoothing,
          tags: ['t'],
          meta_data: { rate_limit_pattern: '$gw_meta.org|$gw_meta.team', other: 1 },
          access_rights: {
            b: { limit: { rate: 10, per: 1, quota_max: 50, quota_renewal_rate: 3600 }, endpoints: [{ path: '/x/{id}', methods: [{ name: 'GET', limit: { rate: 2, per: 5 } }, { name: 'POST', limit: { rate: 0, per: 0 } }] }] },
            a: {},
          },
        }),
      ],
    });
    expect(problems).toEqual([]);
    expect(config.policies).toEqual({
      'ns/gold': {
        id: 'ns/gold',
        source: { kind: 'Policy', namespace: 'ns', name: 'gold' },
        rate: { rate: 100, per: 60 },
        quota_max: -1,
        quota_renewal_rate: 0,
        throttle_interval: 0,
        throttle_retry_limit: 0,
        smoothing,
        meta_data: { rate_limit_pattern: '$gw_meta.org|$gw_meta.team', other: 1 },
        rate_limit_pattern: '$gw_meta.org|$gw_meta.team',
        tags: ['t'],
        access_rights: {
          a: { api_id: 'a', api_name: 'a', limit: null, endpoints: [] },
          b: {
            api_id: 'b',
            api_name: 'API B',
            limit: { rate: { rate: 10, per: 1 }, quota_max: 50, quota_renewal_rate: 3600, throttle_interval: 0, throttle_retry_limit: 0, smoothing: null },
            endpoints: [{ path: '/x/{id}', pattern: '^(?:/x/(.*))$', method: 'GET', rate: 2, per: 5 }],
          },
        },
      },
    });
    expect(Object.keys(config.policies['ns/gold']!.access_rights)).toEqual(['a', 'b']);
  });

  it.each([
    ['no rate', {}, null],
    ['rate 0', { rate: 0, per: 0 }, null],
    ['empty pattern', { meta_data: { rate_limit_pattern: '' } }, null],
  ])('policy with %s has no rate or pattern', (_name, spec, expected) => {
    const { config } = run({ policies: [policy('p', spec)] });
    expect(config.policies['ns/p']).toMatchObject({ rate: expected, rate_limit_pattern: null, smoothing: null });
  });

  it('keeps a Policy\'s smoothing on rate 0, where it smooths nothing, for the limits read to show as unused', () => {
    const smoothing = { enabled: true, threshold: 5, step: 1, trigger: 0.5, delay: 0 };
    const { config, problems } = run({ policies: [policy('p', { rate: 0, per: 0, smoothing })] });
    expect(problems).toEqual([]);
    expect(config.policies['ns/p']).toMatchObject({ rate: null, smoothing });
  });

  it.each([
    ['an upper-case prefix', '$GW_META.org', '"$GW_META.org" has a "$" that starts no $gw_meta.FIELD reference'],
    ['braces', '${gw_meta.org}', '"${gw_meta.org}" has a "$"'],
    ['one good and one mistaken part', '$gw_meta.org | ${gw_meta.team}', '"${gw_meta.team}" has a "$"'],
    ['a prefix without a field', '$gw_meta.', '"$gw_meta." names no field'],
  ])('reports a rate_limit_pattern with %s on the policy, which stays in force as written', (_name, pattern, message) => {
    const { config, problems } = run({ policies: [policy('p', { rate: 5, per: 1, meta_data: { rate_limit_pattern: pattern } })] });
    expect(config.policies['ns/p']).toMatchObject({ rate: { rate: 5, per: 1 }, rate_limit_pattern: pattern });
    expect(problems).toEqual([
      { ref: { kind: 'Policy', namespace: 'ns', name: 'p' }, field: 'spec.meta_data.rate_limit_pattern', reason: 'InvalidRateLimitPattern', message: expect.stringContaining(message) },
    ]);
  });

  it.each(['$gw_meta.org|$gw_meta.team', ' $gw_meta.org | $gw_meta.team ', 'org-$gw_meta.org', 'shared', '$gw_meta.first-name'])(
    'reports no problem for the rate_limit_pattern %j',
    (pattern) => {
      expect(run({ policies: [policy('p', { meta_data: { rate_limit_pattern: pattern } })] }).problems).toEqual([]);
    },
  );

  it('reports a grant of a missing API on the policy and keeps its other grants', () => {
    const { config, problems } = run({ apiDefinitions: apis, policies: [policy('p', { access_rights: { missing: {}, b: {} } })] });
    expect(Object.keys(config.policies['ns/p']!.access_rights)).toEqual(['b']);
    expect(problems).toEqual([
      { ref: { kind: 'Policy', namespace: 'ns', name: 'p' }, field: 'spec.access_rights["missing"]', reason: 'MissingApi', message: 'no ApiDefinition has api_id "missing"' },
    ]);
  });

  it('compiles a grant of an API deleted but still served against that API, and does not serve it itself', () => {
    const served = run({ apiDefinitions: apis }).config.apis.find((api) => api.api_id === 'b')!;
    const withoutB = apis.filter((resource) => resource.spec.api_id !== 'b');
    const { config, problems } = run({
      apiDefinitions: withoutB,
      policies: [policy('p', { access_rights: { b: { limit: { rate: 3, per: 1 } } } })],
      retainedApis: [served],
    });
    expect(config.apis.map((api) => api.api_id)).not.toContain('b');
    expect(config.policies['ns/p']!.access_rights.b).toMatchObject({ api_id: 'b', api_name: served.name, limit: { rate: { rate: 3, per: 1 } } });
    expect(problems).toEqual([]);
  });

  it('reports a key-level per-endpoint limit on an ignored endpoint, naming both, and leaves that limit out', () => {
    const limit = { rate: 1, per: 1 };
    const { config, problems } = run({
      apiDefinitions: apis,
      policies: [
        policy('p', {
          access_rights: {
            a: {
              endpoints: [
                { path: '/public/docs', methods: [{ name: 'GET', limit }, { name: 'POST', limit }] },
                { path: '/open', methods: [{ name: 'DELETE', limit }] },
                { path: '/private', methods: [{ name: 'GET', limit }] },
              ],
            },
          },
        }),
      ],
    });
    expect(config.policies['ns/p']!.access_rights.a!.endpoints.map((e) => `${e.method} ${e.path}`)).toEqual(['POST /public/docs', 'GET /private']);
    expect(problems).toHaveLength(2);
    expect(problems[0]).toEqual({
      ref: { kind: 'Policy', namespace: 'ns', name: 'p' },
      field: 'spec.access_rights["a"].endpoints',
      reason: 'IgnoredEndpointWithKeyLimit',
      message: expect.stringMatching(/GET \/public\/docs .*ignored \(no-auth\) endpoint GET \/public\/\.\* of ApiDefinition ns\/a/),
    });
    expect(problems[1]!.message).toMatch(/DELETE \/open .* \* \/open/);
  });

  it('reports a key-level endpoint path that is not a valid regex and leaves the whole policy out, since without that limit it would be looser', () => {
    const { config, problems } = run({
      apiDefinitions: apis,
      policies: [policy('p', { access_rights: { b: { endpoints: [{ path: '/x(', methods: [{ name: 'GET', limit: { rate: 1, per: 1 } }] }] } } }), policy('q', { access_rights: { b: {} } })],
    });
    expect(problems).toEqual([expect.objectContaining({ reason: 'InvalidRegex', field: 'spec.access_rights["b"].endpoints[0].path' })]);
    expect(Object.keys(config.policies)).toEqual(['ns/q']);
  });

  it("compiles a grant of an API whose resource is refused against the API's last good version", () => {
    const brokenB = { metadata: { name: 'b', namespace: 'ns' }, spec: { api_id: 'b', proxy: { listen_path: 42 } } } as unknown as ApiDefinitionInput;
    const grant = policy('p', { access_rights: { b: {} } });
    const lastGood = run({ apiDefinitions: [classic('b', { name: 'API B' })] }).config.apis;
    const kept = run({ apiDefinitions: [brokenB], policies: [grant], lastGoodApis: lastGood });
    expect(new Set(kept.problems.map((p) => `${p.ref.name} ${p.reason}`))).toEqual(new Set(['b InvalidSpec']));
    expect(kept.config.policies['ns/p']!.access_rights.b).toMatchObject({ api_id: 'b', api_name: 'API B' });
    // Without a last good version, or once the resource is gone, the grant is of a missing API.
    expect(run({ apiDefinitions: [brokenB], policies: [grant] }).problems.map((p) => p.reason)).toContain('MissingApi');
    expect(run({ apiDefinitions: [], policies: [grant], lastGoodApis: lastGood }).problems.map((p) => p.reason)).toEqual(['MissingApi']);
  });

  it('refuses a misspelt field of an API or a policy, naming it, where a parse would drop it', () => {
    const typoApi = classic('t', { global_rate_limt: { rate: 5, per: 10 } } as Partial<ApiDefinitionInput['spec']>);
    const typoPolicy = policy('p', { rate: 5, per: 10, quota_maxx: 3, access_rights: { a: {} } } as PolicyInput['spec']);
    const { config, problems } = run({ apiDefinitions: [classic('a'), typoApi], policies: [typoPolicy] });
    expect(config.apis.map((a) => a.api_id)).toEqual(['a']);
    expect(Object.keys(config.policies)).toEqual([]);
    expect(problems.map((p) => [p.ref.name, p.field, p.reason])).toEqual([
      ['t', 'spec.global_rate_limt', 'UnknownField'],
      ['p', 'spec.quota_maxx', 'UnknownField'],
    ]);
    expect(problems[0]!.message).toMatch(/no field "global_rate_limt"/);
  });

  it('reports an invalid policy spec and leaves that policy out', () => {
    const { config, problems } = run({ policies: [policy('p', { rate: 5 } as PolicyInput['spec']), policy('q', { rate: 5, per: 5 })] });
    expect(Object.keys(config.policies)).toEqual(['ns/q']);
    expect(problems.map((p) => [p.ref.name, p.field, p.reason])).toEqual([
      ['p', 'spec', 'InvalidSpec'],
      ['p', 'spec.per', 'InvalidSpec'],
    ]);
  });
});

describe('compileForApi', () => {
  const input: CompileInput = {
    apiDefinitions: [classic('a'), classic('b'), classic('bad', { extended_paths: { ignored: [{ path: '(' }] } })],
    policies: [policy('pa', { access_rights: { a: {}, b: {}, gone: {} } }), policy('pb', { access_rights: { b: {} } }), policy('none', {})],
    settings: { enable_redis_rolling_limiter: true },
  };

  it('holds that API and every policy covering it (granting it, or granting none), whole', () => {
    const { config, problems } = compileForApi('a', input);
    expect(compiledConfigSchema.parse(config)).toEqual(config);
    expect(config.apis.map((x) => x.api_id)).toEqual(['a']);
    expect(Object.keys(config.policies)).toEqual(['ns/none', 'ns/pa']);
    expect(Object.keys(config.policies['ns/pa']!.access_rights)).toEqual(['a', 'b']);
    expect(config.settings.enable_redis_rolling_limiter).toBe(true);
    expect(problems).toEqual([expect.objectContaining({ reason: 'MissingApi', ref: expect.objectContaining({ name: 'pa' }) })]);
  });

  it('reports only the problems of that API and its policies', () => {
    expect(compileForApi('b', input).config.apis.map((x) => x.api_id)).toEqual(['b']);
    const bad = compileForApi('bad', input);
    expect(bad.config.apis).toEqual([]);
    expect(bad.problems).toEqual([expect.objectContaining({ reason: 'InvalidRegex', ref: expect.objectContaining({ name: 'bad' }) })]);
  });

  it('gives a config without APIs for an api_id nobody has, with only the policies covering every API', () => {
    const { config, problems } = compileForApi('nobody', input);
    expect(config.apis).toEqual([]);
    expect(Object.keys(config.policies)).toEqual(['ns/none']);
    expect(problems).toEqual([]);
  });

  it('is deterministic whatever the input order', () => {
    const reversed = { ...input, apiDefinitions: [...input.apiDefinitions].reverse(), policies: [...input.policies].reverse() };
    expect(JSON.stringify(compile(reversed))).toBe(JSON.stringify(compile(input)));
  });

  it('orders APIs by api_id in code units, as the Kubernetes source orders its ConfigMaps, not by a locale', () => {
    const lower = classic('lower', { api_id: 'a-api' });
    const upper = classic('upper', { api_id: 'B-api' });
    const short = classic('short', { api_id: 'a' });
    const { config } = compile({ apiDefinitions: [lower, short, upper], policies: [] });
    expect(config.apis.map((a) => a.api_id)).toEqual(['B-api', 'a', 'a-api']);
  });
});

describe('ApiCompileCache', () => {
  const orders = classic('orders');
  const users = classic('users');
  /** A resource as the folder source hands it to each load: a new object around the spec it parsed once. */
  const again = (resource: ApiDefinitionInput, metadata: Partial<ApiDefinitionInput['metadata']> = {}): ApiDefinitionInput => ({
    metadata: { ...resource.metadata, ...metadata },
    spec: resource.spec,
  });

  it('gives an API whose spec is the same object its earlier compiled object, and compiles an edited one', () => {
    const cache = new ApiCompileCache();
    const first = compile({ apiDefinitions: [orders, users], policies: [], cache });
    const edited = { ...users, spec: { ...users.spec, proxy: { listen_path: '/people/', target_url: target } } };
    const second = compile({ apiDefinitions: [again(orders), edited], policies: [], cache });
    expect(second.config.apis[0]).toBe(first.config.apis[0]);
    expect(second.config.apis[1]).not.toBe(first.config.apis[1]);
    expect(second.config.apis[1]?.listen_path).toBe('/people/');
    expect(second).toEqual(compile({ apiDefinitions: [orders, edited], policies: [] }));
  });

  it('compiles the same spec again under another name, namespace or uid', () => {
    const cache = new ApiCompileCache();
    const unnamed = api('plain', { proxy: { listen_path: '/plain/', target_url: target } });
    compile({ apiDefinitions: [unnamed], policies: [], cache });
    for (const metadata of [{ name: 'renamed' }, { namespace: 'other' }, { uid: 'uid-new' }]) {
      const moved = again(unnamed, metadata);
      const cached = compile({ apiDefinitions: [moved], policies: [], cache });
      expect(cached).toEqual(compile({ apiDefinitions: [moved], policies: [] }));
      expect(onlyApi(cached.config).source).toEqual(expect.objectContaining(metadata));
    }
  });

  it('reports an invalid API every time it is compiled', () => {
    const cache = new ApiCompileCache();
    const broken = api('broken', { api_id: 'broken', proxy: { listen_path: 'no-slash', target_url: 'not a url' } } as ApiDefinitionInput['spec']);
    const first = compile({ apiDefinitions: [broken], policies: [], cache });
    expect(first.problems.length).toBeGreaterThan(0);
    expect(compile({ apiDefinitions: [again(broken)], policies: [], cache })).toEqual(first);
  });
});
