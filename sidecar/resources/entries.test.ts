import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { apiEntryOf, categoryEntryOf, findProduct, productOf } from './entries.ts';

describe('apiEntryOf', () => {
  it('reads a category listed twice as one category of the API', () => {
    expect(apiEntryOf({ metadata: { name: 'pets' }, spec: { categories: ['animals', 'public', 'animals'], oas: {} } }, 'shop')?.categories).toEqual(['animals', 'public']);
  });

  it('reads api_id, categories and the OAS flag', () => {
    const entry = apiEntryOf(
      { metadata: { name: 'pets', namespace: 'shop' }, spec: { api_id: 'pets-v1', categories: ['animals'], oas: { openapi: '3.0.3' } } },
      'default',
    );
    expect(entry).toEqual({ apiId: 'pets-v1', namespace: 'shop', name: 'pets', oas: true, categories: ['animals'] });
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
    expect(findProduct(items, 'p2', productOf)).toBe(items[1]);
    expect(findProduct(items, 'other', productOf)).toBe(items[0]);
    expect(findProduct(items, 'x', productOf)).toBe(items[1]);
    expect(findProduct(items, 'nope', productOf)).toBeUndefined();
    expect(productOf(items[1])?.tags).toEqual([{ Name: 'a' }]);
  });

  it('finds a product by its spec.id before an id-less product of that name, whatever their order', () => {
    const named = { metadata: { name: 'silver' }, spec: {} };
    const identified = { metadata: { name: 'zz-other' }, spec: { id: 'silver' } };
    expect(findProduct([named, identified], 'silver', productOf)).toBe(identified);
    expect(findProduct([identified, named], 'silver', productOf)).toBe(identified);
    expect(findProduct([named], 'silver', productOf)).toBe(named);
  });
});
