import { describe, expect, it } from 'vitest';
import { apiNameOf, compiledApiId, configMapName, MANAGED_BY_SELECTOR } from './compiled-config-map.ts';

describe('compiled ConfigMap contract', () => {
  it('names the ConfigMap gw-api-<name> and reads the ApiDefinition name back from it', () => {
    expect(configMapName('orders')).toBe('gw-api-orders');
    expect(apiNameOf(configMapName('orders'))).toBe('orders');
    expect(apiNameOf('kube-root-ca.crt')).toBeUndefined();
  });

  it('selects the operator-managed objects by label', () => {
    expect(MANAGED_BY_SELECTOR).toBe('app.kubernetes.io/managed-by=gw-operator');
  });

  it('reads the api_id a compiled config carries, however long, even from a config that is otherwise invalid', () => {
    const long = `api-${'x'.repeat(100)}`;
    expect(compiledApiId(JSON.stringify({ version: 1, apis: [{ api_id: long }], policies: 'not valid' }))).toBe(long);
    for (const json of [undefined, '', '{not json', 'null', '42', '{"apis":"x"}', '{"apis":[]}', '{"apis":[null]}', '{"apis":[{"api_id":7}]}', '{"apis":[{"api_id":""}]}']) {
      expect(compiledApiId(json), String(json)).toBeUndefined();
    }
  });
});
