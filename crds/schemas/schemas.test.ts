import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { apiDefinitionSpecSchema, categorySpecSchema, keySpecSchema, policySpecSchema, portalProductSpecSchema } from './index.ts';
import { sessionSchema } from '../session.ts';

const classic = { proxy: { listen_path: '/a/', target_url: 'http://127.0.0.1:9000' } };
const oas = {
  openapi: '3.0.3',
  paths: {},
  'x-gw-api-gateway': { server: { listenPath: { value: '/o/' } }, upstream: { url: 'http://127.0.0.1:9000' } },
};
const smoothing = { enabled: true, threshold: 5, step: 5, trigger: 0.5, delay: 10 };

function issues(schema: z.ZodType, value: unknown): { path: string; message: string }[] {
  const result = schema.safeParse(value);
  return result.success ? [] : result.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
}

describe('resource schemas (zod side of the CRDs)', () => {
  it.each([
    ['classic', apiDefinitionSpecSchema, classic],
    ['oas', apiDefinitionSpecSchema, { oas }],
    ['policy', policySpecSchema, { rate: 10, per: 60, smoothing, access_rights: { a: { api_id: 'a', limit: { rate: 5, per: 1 } } } }],
    ['key', keySpecSchema, { rate: 10, per: 60, key_hash: 'a'.repeat(64), meta_data: { any: { nested: [1] } } }],
    ['key whose smoothing holds off for a year', keySpecSchema, { rate: 10, per: 60, smoothing: { ...smoothing, delay: 31_536_000 } }],
    ['category', categorySpecSchema, { name: 'public' }],
    ['portal product', portalProductSpecSchema, { id: 'starter', tags: [{ Name: 'a' }, { Name: 'b' }] }],
  ])('accepts a valid %s spec', (_name, schema, value) => {
    expect(issues(schema, value)).toEqual([]);
  });

  it('applies nested defaults and keeps top-level classic fields unset so oas stays exclusive', () => {
    const parsed = apiDefinitionSpecSchema.parse({
      ...classic,
      auth: {},
      rate_limit_resources: [{ label: 'l' }],
      extended_paths: { rate_limit: [{ path: '/x', method: 'GET', rate: 1, per: 1 }], ignored: [{ path: '/y' }] },
    });
    expect(parsed.auth?.auth_header_name).toBe('Authorization');
    expect(parsed.proxy?.strip_listen_path).toBe(true);
    expect(parsed.rate_limit_resources?.[0]?.local).toEqual({ count: 1000, interval: '1s' });
    expect(parsed.extended_paths?.rate_limit?.[0]?.enabled).toBe(true);
    expect(parsed.extended_paths?.ignored?.[0]?.method).toBe('*');
    expect(parsed.use_keyless).toBeUndefined();
    expect(apiDefinitionSpecSchema.parse({ oas }).use_keyless).toBeUndefined();
  });

  it.each<[string, z.ZodType, unknown, string, RegExp]>([
    ['neither classic nor oas', apiDefinitionSpecSchema, {}, '', /either proxy .* or oas/],
    ['classic and oas together', apiDefinitionSpecSchema, { ...classic, oas }, '', /oas cannot be combined/],
    ['oas with a classic limit', apiDefinitionSpecSchema, { oas, global_rate_limit: { rate: 1, per: 1 } }, '', /oas cannot be combined/],
    ['rate without per', apiDefinitionSpecSchema, { ...classic, global_rate_limit: { rate: 10 } }, 'global_rate_limit', /set together/],
    ['per 0 with a rate', apiDefinitionSpecSchema, { ...classic, global_rate_limit: { rate: 10, per: 0 } }, 'global_rate_limit.per', /greater than 0/],
    ['negative per', apiDefinitionSpecSchema, { ...classic, global_rate_limit: { rate: 10, per: -1 } }, 'global_rate_limit.per', /Too small/i],
    ['rate as a string', apiDefinitionSpecSchema, { ...classic, global_rate_limit: { rate: 'ten', per: 1 } }, 'global_rate_limit.rate', /expected number/],
    ['unknown method', apiDefinitionSpecSchema, { ...classic, extended_paths: { rate_limit: [{ path: '/x', method: 'FETCH', rate: 1, per: 1 }] } }, 'extended_paths.rate_limit.0.method', /Invalid option/],
    ['endpoint per 0', apiDefinitionSpecSchema, { ...classic, extended_paths: { rate_limit: [{ path: '/x', method: 'GET', rate: 1, per: 0 }] } }, 'extended_paths.rate_limit.0.per', /greater than 0/],
    ['listen path without a slash', apiDefinitionSpecSchema, { proxy: { ...classic.proxy, listen_path: 'a' } }, 'proxy.listen_path', /Invalid string/],
    ['oversized listen path', apiDefinitionSpecSchema, { proxy: { ...classic.proxy, listen_path: `/${'a'.repeat(1024)}` } }, 'proxy.listen_path', /Too big/],
    ['ftp target', apiDefinitionSpecSchema, { proxy: { ...classic.proxy, target_url: 'ftp://x' } }, 'proxy.target_url', /must be an http:\/\/ or https:\/\/ URL/],
    ['target naming a user', apiDefinitionSpecSchema, { proxy: { ...classic.proxy, target_url: 'http://svc:s3cret@127.0.0.1:9000/base' } }, 'proxy.target_url', /naming no user or password/],
    ['too many categories', apiDefinitionSpecSchema, { ...classic, categories: Array.from({ length: 65 }, (_, i) => `c${i}`) }, 'categories', /Too big/],
    ['bad api_id', apiDefinitionSpecSchema, { ...classic, api_id: '../etc' }, 'api_id', /Invalid string/],
    ['duplicate stream label', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a' }, { label: 'a' }] }, 'rate_limit_resources.1.label', /duplicate label/],
    ['bad stream interval', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '1 s' } }] }, 'rate_limit_resources.0.local.interval', /Invalid string/],
    ['stream interval of 0s', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '0s' } }] }, 'rate_limit_resources.0.local.interval', /at least 1ms and at most 8760h/],
    ['stream interval under 1ms', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '999us' } }] }, 'rate_limit_resources.0.local.interval', /at least 1ms/],
    ['stream interval over a year', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '8761h' } }] }, 'rate_limit_resources.0.local.interval', /at most 8760h/],
    ['OAS per of 0s with a rate', apiDefinitionSpecSchema, { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { rate: 1, per: '0s' } } } } }, 'oas.x-gw-api-gateway.upstream.rateLimit.per', /per must be at least 1ms/],
    ['bad OAS per', apiDefinitionSpecSchema, { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { rate: 1, per: '10' } } } } }, 'oas.x-gw-api-gateway.upstream.rateLimit.per', /Invalid string/],
    ['trigger 0', policySpecSchema, { rate: 10, per: 1, smoothing: { ...smoothing, trigger: 0 } }, 'smoothing.trigger', /greater than 0, when smoothing is enabled/],
    ['negative trigger, even switched off', policySpecSchema, { rate: 10, per: 1, smoothing: { ...smoothing, enabled: false, trigger: -1 } }, 'smoothing.trigger', /and at least 0 when it is off/],
    ['enabled smoothing without a step', policySpecSchema, { rate: 10, per: 1, smoothing: { enabled: true, threshold: 2, trigger: 0.5, delay: 1 } }, 'smoothing.step', /step must be set/],
    ['enabled smoothing with threshold 0', keySpecSchema, { rate: 10, per: 1, smoothing: { ...smoothing, threshold: 0 } }, 'smoothing.threshold', /at least 1/],
    ['threshold above rate', policySpecSchema, { rate: 4, per: 1, smoothing }, 'smoothing.threshold', /must not exceed rate/],
    ['a smoothing delay over a year', keySpecSchema, { rate: 10, per: 1, smoothing: { ...smoothing, delay: 31_536_001 } }, 'smoothing.delay', /Too big: expected number to be <=31536000/],
    ['per-API limit rate without per', policySpecSchema, { access_rights: { a: { limit: { rate: 3 } } } }, 'access_rights.a.limit', /set together/],
    ['access right keyed by another api_id', policySpecSchema, { access_rights: { a: { api_id: 'b' } } }, 'access_rights', /keyed by its own api_id/],
    ['key-level endpoint per 0', policySpecSchema, { access_rights: { a: { endpoints: [{ path: '/x', methods: [{ name: 'GET', limit: { rate: 1, per: 0 } }] }] } } }, 'access_rights.a.endpoints.0.methods.0.limit.per', /greater than 0/],
    ['key_hash not hex', keySpecSchema, { key_hash: 'z'.repeat(64) }, 'key_hash', /Invalid string/],
    ['key_hash too short', keySpecSchema, { key_hash: 'abc' }, 'key_hash', /Invalid string/],
    ['policy granting a path, not an api_id', policySpecSchema, { access_rights: { '../orders': {} } }, 'access_rights', /keyed by an api_id/],
    ['key granting an api_id with a space', keySpecSchema, { access_rights: { 'my api': {} } }, 'access_rights', /keyed by an api_id/],
    ['policy name with a path separator', keySpecSchema, { apply_policies: ['gold', '../other-ns/gold'] }, 'apply_policies.1', /name of a Policy/],
    ['alias with a terminal escape', keySpecSchema, { alias: 'ops\u001b[2J' }, 'alias', /control characters/],
    ['key quota below -1', keySpecSchema, { quota_max: -2 }, 'quota_max', /Too small/],
    ['duplicate product tag', portalProductSpecSchema, { tags: [{ Name: 'a' }, { Name: 'a' }] }, 'tags.1.Name', /duplicate Name/],
  ])('refuses %s, naming the field', (_name, schema, value, path, message) => {
    expect(issues(schema, value)).toContainEqual({ path, message: expect.stringMatching(message) });
  });

  it.each<[string, z.ZodType, unknown, string, string]>([
    ['a negative step', policySpecSchema, { smoothing: { ...smoothing, step: -1 } }, 'smoothing.step', 'step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative step, switched off', policySpecSchema, { smoothing: { enabled: false, step: -1 } }, 'smoothing.step', 'step must be set, at least 1, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative threshold', keySpecSchema, { smoothing: { ...smoothing, threshold: -1 } }, 'smoothing.threshold', 'threshold must be set, at least 1, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative trigger', keySpecSchema, { smoothing: { ...smoothing, trigger: -0.5 } }, 'smoothing.trigger', 'trigger must be set, greater than 0, when smoothing is enabled, and at least 0 when it is off'],
    ['a negative delay', keySpecSchema, { smoothing: { ...smoothing, delay: -1 } }, 'smoothing.delay', 'Too small: expected number to be >=0'],
    ['a negative stream count', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { count: -1 } }] }, 'rate_limit_resources.0.local.count', 'Too small: expected number to be >=1'],
    ['a stream count of 0', apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { count: 0 } }] }, 'rate_limit_resources.0.local.count', 'Too small: expected number to be >=1'],
  ])('refuses %s with the one bound that applies', (_name, schema, value, path, message) => {
    expect(issues(schema, value)).toEqual([{ path, message }]);
  });

  it.each([
    ['a stream interval of 1ms', { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '1ms' } }] }],
    ['a stream interval of 8760h', { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '8760h' } }] }],
    ['an OAS per of 0s with rate 0', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { rate: 0, per: '0s' } } } } }],
    ['an OAS per of 0s on a switched-off limit', { oas: { ...oas, 'x-gw-api-gateway': { ...oas['x-gw-api-gateway'], upstream: { url: 'http://x', rateLimit: { enabled: false, rate: 5, per: '0s' } } } } }],
  ])('accepts %s', (_name, value) => {
    expect(issues(apiDefinitionSpecSchema, value)).toEqual([]);
  });

  it('reports a duration that is no duration once, by its pattern', () => {
    expect(issues(apiDefinitionSpecSchema, { ...classic, rate_limit_resources: [{ label: 'a', local: { interval: '1' } }] })).toEqual([
      { path: 'rate_limit_resources.0.local.interval', message: expect.stringMatching(/Invalid string/) },
    ]);
  });

  it('keeps in a session only smoothing with every number it needs', () => {
    const active = { enabled: true, threshold: 1, step: 1, trigger: 0.1, delay: 0 };
    expect(sessionSchema.parse({ smoothing: active }).smoothing).toEqual(active);
    expect(sessionSchema.safeParse({ smoothing: { ...active, trigger: 0 } }).success).toBe(false);
    expect(sessionSchema.safeParse({ smoothing: { enabled: true, threshold: 1 } }).success).toBe(false);
  });

  it.each([
    ['enabled: false alone', { enabled: false }],
    ['the create-key answer\'s switched-off smoothing (zeros)', { enabled: false, threshold: 0, step: 0, trigger: 0, delay: 0 }],
    ['switched-off numbers above rate', { enabled: false, threshold: 50, step: 1, trigger: 0.5, delay: 1 }],
    ['no enabled at all (off by default)', { threshold: 50 }],
  ])('accepts smoothing that is off: %s', (_name, off) => {
    expect(issues(policySpecSchema, { rate: 10, per: 1, smoothing: off })).toEqual([]);
    expect(issues(keySpecSchema, { rate: 10, per: 1, smoothing: off, access_rights: { a: { limit: { rate: 10, per: 1, smoothing: off } } } })).toEqual([]);
  });
});
