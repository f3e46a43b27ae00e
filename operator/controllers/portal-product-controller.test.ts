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
});
