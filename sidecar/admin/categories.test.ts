import { describe, expect, it } from 'vitest';
import { countCategories } from './categories.ts';

const api = (name: string, categories: string[]) => ({ apiId: name, namespace: 'ns', name, oas: false, categories });

describe('countCategories', () => {
  it('counts an api_id once: a copy refused as DuplicateApiId is no API of its own', () => {
    const copy = { ...api('billing', ['public']), name: 'billing-copy' };
    expect(countCategories([api('billing', ['public']), copy, api('orders', ['public'])], [])).toEqual([{ name: 'public', count: 2 }]);
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
