import { describe, expect, it } from 'vitest';
import { CategoryController } from './category-controller.ts';
import { enqueuedBy, fakeContext } from './fakes.ts';
import { apiDefinition, category } from './fixtures.ts';

const api = (name: string, categories: string[], namespace = 'ns') => apiDefinition(name, { categories }, 1, namespace);

describe('CategoryController', () => {
  it('counts the APIs of its namespace listing it by spec.name, else by metadata.name', async () => {
    const { ctx, caches } = fakeContext();
    caches.categories.put(category('payments', { name: 'Payments' }));
    caches.categories.put(category('internal'));
    caches.apis.put(api('a', ['Payments', 'internal']));
    caches.apis.put(api('b', ['Payments']));
    caches.apis.put(api('c', ['Payments'], 'elsewhere'));
    const controller = new CategoryController(ctx);
    await controller.reconcile({ namespace: 'ns', name: 'payments' });
    await controller.reconcile({ namespace: 'ns', name: 'internal' });
    expect(caches.categories.get('ns', 'payments')?.status).toMatchObject({ apis: 2, conditions: [{ status: 'True', message: '2 API(s) in category Payments' }] });
    expect(caches.categories.get('ns', 'internal')?.status?.apis).toBe(1);
  });

  it('counts an api_id once: a copy refused as DuplicateApiId is no API of its own', async () => {
    const { ctx, caches } = fakeContext();
    caches.categories.put(category('public'));
    caches.apis.put(apiDefinition('billing', { api_id: 'billing-api', categories: ['public'] }));
    caches.apis.put(apiDefinition('billing-copy', { api_id: 'billing-api', categories: ['public'] }));
    caches.apis.put(apiDefinition('orders', { categories: ['public'] }));
    await new CategoryController(ctx).reconcile({ namespace: 'ns', name: 'public' });
    expect(caches.categories.get('ns', 'public')?.status).toMatchObject({ apis: 2, conditions: [{ message: '2 API(s) in category public' }] });
  });

  it('recounts every category of the namespace when an API changes', () => {
    const { ctx, caches } = fakeContext();
    caches.categories.put(category('payments'));
    caches.categories.put(category('internal'));
    expect(enqueuedBy(new CategoryController(ctx), () => caches.apis.put(api('a', [])))).toEqual(['ns/internal', 'ns/payments']);
  });
});
