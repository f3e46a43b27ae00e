import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { productNamed } from '../../crds/product-id.ts';
import { apiEntryOf, categoryEntryOf, productOf } from './entries.ts';

describe('apiEntryOf', () => {
  it('reads a category listed twice as one category of the API', () => {
    expect(apiEntryOf({ metadata: { name: 'pets' }, spec: { categories: ['animals', 'public', 'animals'], oas: {} } }, 'shop')?.categories).toEqual(['animals', 'public']);
  });

  it('reads api_id, categories and the OAS flag', () => {
    const entry = apiEntryOf(
      { metadata: { name: 'pets', namespace: 'shop' }, spec: { api_id: 'pets-v1', categories: ['animals'], oas: { openapi: '3.0.3' } } },
      'default',
    );
    expect(entry).toEqual({ apiId: 'pets-v1', namespace: 'shop', name: 'pets', oas: true, categories: ['animals'], createdMs: null });
  });

  it('reads when the definition was created, which settles an api_id two claim', () => {
    const created = apiEntryOf({ metadata: { name: 'pets', creationTimestamp: '2026-01-02T03:04:05Z' }, spec: {} }, 'shop');
    expect(created?.createdMs).toBe(Date.parse('2026-01-02T03:04:05Z'));
  });

  it("uses the contract's default api_id (first 24 hex of sha256 of namespace/name)", () => {
    const expected = createHash('sha256').update('shop/pets').digest('hex').slice(0, 24);
    expect(apiEntryOf({ metadata: { name: 'pets' }, spec: { proxy: {} } }, 'shop')).toMatchObject({ apiId: expected, oas: false, categories: [] });
  });

  it('still finds a definition whose other fields are invalid', () => {
    expect(apiEntryOf({ metadata: { name: 'x', namespace: 'n' }, spec: { api_id: 'x1', categories: 'oops', proxy: 5 } }, 'd')).toMatchObject({
      apiId: 'x1',
      categories: [],
    });
  });

  it('ignores objects without a name', () => {
    expect(apiEntryOf({ spec: {} }, 'd')).toBeNull();
    expect(apiEntryOf('text', 'd')).toBeNull();
  });
});

describe('categories and products', () => {
  it('uses spec.name, else metadata.name', () => {
    expect(categoryEntryOf({ metadata: { name: 'c1' }, spec: { name: 'Payments' } }, 'd')).toEqual({ namespace: 'd', name: 'Payments' });
    expect(categoryEntryOf({ metadata: { name: 'c1', namespace: 'n' } }, 'd')).toEqual({ namespace: 'n', name: 'c1' });
  });

  it('finds a product by spec.id before metadata.name', () => {
    const items = [
      { metadata: { name: 'p2' }, spec: { id: 'other' } },
      { metadata: { name: 'x' }, spec: { id: 'p2', tags: [{ Name: 'a' }] } },
    ];
    expect(productNamed(items, 'p2', productOf)).toBe(items[1]);
    expect(productNamed(items, 'other', productOf)).toBe(items[0]);
    expect(productNamed(items, 'x', productOf)).toBe(items[1]);
    expect(productNamed(items, 'nope', productOf)).toBeUndefined();
    expect(productOf(items[1])?.tags).toEqual([{ Name: 'a' }]);
  });

  it('finds a product by its spec.id before an id-less product of that name, whatever their order', () => {
    const named = { metadata: { name: 'silver' }, spec: {} };
    const identified = { metadata: { name: 'zz-other' }, spec: { id: 'silver' } };
    expect(productNamed([named, identified], 'silver', productOf)).toBe(identified);
    expect(productNamed([identified, named], 'silver', productOf)).toBe(identified);
    expect(productNamed([named], 'silver', productOf)).toBe(named);
  });

  it('gives a tie to the oldest product, then the first by namespace and name, whatever order the list came in', () => {
    const aged = [
      { metadata: { name: 'a', namespace: 'shop', creationTimestamp: '2026-11-02T10:00:00Z' }, spec: { id: 'gold' } },
      { metadata: { name: 'b', namespace: 'shop', creationTimestamp: '2026-11-01T10:00:00Z' }, spec: { id: 'gold' } },
    ];
    expect(productNamed(aged, 'gold', productOf)).toBe(aged[1]);
    const products = [
      { metadata: { name: 'b', namespace: 'shop' }, spec: { id: 'gold' } },
      { metadata: { name: 'a', namespace: 'shop' }, spec: { id: 'gold' } },
      { metadata: { name: 'z', namespace: 'billing' }, spec: { id: 'gold' } },
    ];
    expect(productNamed(products, 'gold', productOf)).toBe(products[2]);
    expect(productNamed(products.slice(0, 2), 'gold', productOf)).toBe(products[1]);
    const namedTwice = [{ metadata: { name: 'gold', namespace: 'b' }, spec: {} }, { metadata: { name: 'gold', namespace: 'a' }, spec: {} }];
    expect(productNamed(namedTwice, 'gold', productOf)).toBe(namedTwice[1]);
  });
});
