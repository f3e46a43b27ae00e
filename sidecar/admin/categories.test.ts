import { describe, expect, it } from 'vitest';
import type { ApiEntry } from '../resources/types.ts';
import { countCategories, holders } from './categories.ts';

const api = (name: string, categories: string[]): ApiEntry => ({ apiId: name, namespace: 'ns', name, oas: false, categories, createdMs: null });

describe('countCategories', () => {
  it('counts an api_id once: a copy refused as DuplicateApiId is no API of its own', () => {
    const copy = { ...api('billing', ['public']), name: 'billing-copy' };
    expect(countCategories([api('billing', ['public']), copy, api('orders', ['public'])], [])).toEqual([{ name: 'public', count: 2 }]);
  });

  it("counts only the categories of an api_id's holder: a copy's own are no API's", () => {
    const holder = { ...api('billing', ['public']), createdMs: 1_000 };
    const copy = { ...api('billing', ['copied']), name: 'aa-billing-copy', createdMs: 2_000 };
    expect(countCategories([copy, holder], [])).toEqual([{ name: 'public', count: 1 }]);
    expect(countCategories([holder, copy], [{ namespace: 'ns', name: 'copied' }])).toEqual([
      { name: 'copied', count: 0 },
      { name: 'public', count: 1 },
    ]);
  });

  it('counts APIs per category, includes empty Category resources, sorts by name', () => {
    const result = countCategories(
      [api('a', ['payments', 'public']), api('b', ['public']), api('c', [])],
      [
        { namespace: 'ns', name: 'internal' },
        { namespace: 'other', name: 'public' },
      ],
    );
    expect(result).toEqual([
      { name: 'internal', count: 0 },
      { name: 'payments', count: 1 },
      { name: 'public', count: 2 },
    ]);
  });

  it('is empty when there is nothing', () => {
    expect(countCategories([], [])).toEqual([]);
  });
});

describe('holders', () => {
  it('gives an api_id to the oldest claimant, whatever the order read', () => {
    const older = { ...api('pets', ['a']), name: 'zz-pets', createdMs: 1_000 };
    const newer = { ...api('pets', ['b']), name: 'aa-pets', createdMs: 2_000 };
    expect(holders([newer, older]).get('pets')).toBe(older);
    expect(holders([older, newer]).get('pets')).toBe(older);
  });

  it('gives an api_id to the first by namespace, then name, where there is no creation time (a folder)', () => {
    const first = { ...api('pets', ['a']), namespace: 'a', name: 'zz' };
    const byName = { ...api('pets', ['b']), namespace: 'b', name: 'aa' };
    const later = { ...api('pets', ['c']), namespace: 'b', name: 'bb' };
    expect(holders([later, byName, first]).get('pets')).toBe(first);
    expect(holders([later, byName]).get('pets')).toBe(byName);
  });
});
