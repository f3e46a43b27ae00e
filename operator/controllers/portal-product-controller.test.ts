import { describe, expect, it } from 'vitest';
import { portalProductSpecSchema } from '../../crds/schemas/index.ts';
import { fakeContext } from './fakes.ts';
import { PortalProductController } from './portal-product-controller.ts';

describe('PortalProductController', () => {
  it('reports the tag count, and writes nothing more while it stays', async () => {
    const { ctx, caches, status } = fakeContext();
    caches.products.put({
      apiVersion: 'gw.dev/v1alpha1',
      kind: 'PortalProduct',
      metadata: { name: 'shop', namespace: 'ns', generation: 1 },
      spec: portalProductSpecSchema.parse({ tags: [{ Name: 'a' }, { Name: 'b' }] }),
    });
    const controller = new PortalProductController(ctx);
    await controller.reconcile({ namespace: 'ns', name: 'shop' });
    await controller.reconcile({ namespace: 'ns', name: 'shop' });
    expect(caches.products.get('ns', 'shop')?.status).toMatchObject({ tags: 2, conditions: [{ status: 'True', reason: 'Valid', message: '2 tag(s)' }] });
    expect(status.writes).toHaveLength(1);
  });

  it('reports DuplicateProductId on a product whose id reaches another, and Valid again once that one goes', async () => {
    const { ctx, caches, status, events } = fakeContext();
    const product = (namespace: string, name: string, spec: object) => ({
      apiVersion: 'gw.dev/v1alpha1' as const,
      kind: 'PortalProduct' as const,
      metadata: { name, namespace, generation: 1 },
      spec: portalProductSpecSchema.parse(spec),
    });
    const controller = new PortalProductController(ctx);
    const enqueued: string[] = [];
    for (const watch of controller.watches) watch.subscribe((request) => enqueued.push(`${request.namespace}/${request.name}`));
    caches.products.put(product('shop', 'gold-b', { id: 'gold' }));
    caches.products.put(product('shop', 'gold-a', { id: 'gold' }));
    // A product without an id answers to its name, which the first product's id takes.
    caches.products.put(product('shop', 'gold', {}));
    expect(enqueued).toEqual(expect.arrayContaining(['shop/gold-b', 'shop/gold-a', 'shop/gold']));
    for (const name of ['gold-a', 'gold-b', 'gold']) await controller.reconcile({ namespace: 'shop', name });
    const conditionOf = (name: string) => caches.products.get('shop', name)?.status?.conditions?.[0];
    expect(conditionOf('gold-a')).toMatchObject({ status: 'True', reason: 'Valid' });
    expect(conditionOf('gold-b')).toMatchObject({ status: 'False', reason: 'DuplicateProductId', message: 'product_id "gold" reaches PortalProduct shop/gold-a, which tags posted to it are added to' });
    expect(conditionOf('gold')).toMatchObject({ status: 'False', reason: 'DuplicateProductId' });
    expect(events.events.map((e) => `${e.name}/${e.type}/${e.reason}`)).toEqual(['gold-b/Warning/DuplicateProductId', 'gold/Warning/DuplicateProductId']);
    // The product that held the id goes: the watch asks for the others, and the next one holds it.
    enqueued.length = 0;
    caches.products.remove('shop', 'gold-a');
    expect(enqueued.sort()).toEqual(['shop/gold', 'shop/gold-a', 'shop/gold-b']);
    for (const name of ['gold-b', 'gold']) await controller.reconcile({ namespace: 'shop', name });
    expect(conditionOf('gold-b')).toMatchObject({ status: 'True', reason: 'Valid' });
    expect(conditionOf('gold')).toMatchObject({ status: 'False', reason: 'DuplicateProductId', message: 'product_id "gold" reaches PortalProduct shop/gold-b, which tags posted to it are added to' });
    expect(status.writes.length).toBe(5);
  });
});
