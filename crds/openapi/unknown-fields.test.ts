import { describe, expect, it } from 'vitest';
import { apiDefinitionSpecSchema } from '../schemas/api-definition.ts';
import { keySpecSchema } from '../schemas/key.ts';
import { policySpecSchema } from '../schemas/policy.ts';
import { unknownFields } from './unknown-fields.ts';

describe('unknownFields', () => {
  it('names each field the kind does not define, in objects, lists and maps alike', () => {
    const spec = {
      api_id: 'a',
      global_rate_limt: { rate: 5, per: 10 },
      proxy: { listen_path: '/a/', target_url: 'http://up', strip_listen_pth: true },
      extended_paths: { rate_limit: [{ path: '/x', method: 'GET', rate: 1, per: 1, burst: 2 }] },
    };
    expect(unknownFields(apiDefinitionSpecSchema, spec)).toEqual(['global_rate_limt', 'proxy.strip_listen_pth', 'extended_paths.rate_limit[0].burst']);
    expect(unknownFields(policySpecSchema, { rate: 1, per: 1, access_rights: { a: { api_id: 'a', limt: {} } } })).toEqual(['access_rights["a"].limt']);
    expect(unknownFields(keySpecSchema, { is_inactve: true })).toEqual(['is_inactve']);
  });

  it('accepts what the CRD keeps as free-form: an OAS document and meta_data', () => {
    const oas = { oas: { openapi: '3.0.3', info: { title: 't', 'x-team': 'a' }, paths: { '/a': { get: { operationId: 'a', summary: 'anything' } } }, components: {}, 'x-gw-api-gateway': { info: { name: 'n' } } } };
    expect(unknownFields(apiDefinitionSpecSchema, oas)).toEqual([]);
    expect(unknownFields(policySpecSchema, { rate: 1, per: 1, meta_data: { rate_limit_pattern: '$gw_meta.org', anything: { nested: 1 } } })).toEqual([]);
  });

  it('still names an unknown field beside the free-form parts of the OAS extension', () => {
    const oas = { oas: { openapi: '3.0.3', paths: {}, 'x-gw-api-gateway': { info: { name: 'n' }, upstrem: { url: 'http://up' } } } };
    expect(unknownFields(apiDefinitionSpecSchema, oas)).toEqual(['oas.x-gw-api-gateway.upstrem']);
  });
});
