import { describe, expect, it } from 'vitest';
import { apiVersion, crdName, kindNames, kinds } from './kinds.ts';

describe('kinds registry', () => {
  it('names the five kinds of gw.dev/v1alpha1 with their plurals and short names', () => {
    expect(apiVersion).toBe('gw.dev/v1alpha1');
    expect(kindNames.map((k) => [k, kinds[k].plural, kinds[k].shortName])).toEqual([
      ['ApiDefinition', 'apidefinitions', 'gwapi'],
      ['Policy', 'policies', 'gwpol'],
      ['Key', 'keys', 'gwkey'],
      ['Category', 'categories', 'gwcat'],
      ['PortalProduct', 'portalproducts', 'gwprod'],
    ]);
    expect(crdName(kinds.Policy)).toBe('policies.gw.dev');
    expect(kinds.PortalProduct.listKind).toBe('PortalProductList');
  });
});
