import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { forObjects, type Watch } from '../kit/watch.ts';
import type { ControllerContext } from './context.ts';

/** PortalProduct status: its tag count (tag names are unique by the CRD's list-map schema). */
export class PortalProductController implements KindController {
  readonly kind = 'PortalProduct';
  readonly watches: Watch[];
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    this.watches = [forObjects(ctx.caches.products)];
  }

  async reconcile({ namespace, name }: Request): Promise<void> {
    const product = this.#ctx.caches.products.get(namespace, name);
    if (!product || product.metadata.deletionTimestamp) return;
    const tags = product.spec.tags.length;
    await setStatus(this.#ctx, 'PortalProduct', product, { ready: true, reason: 'Valid', message: `${tags} tag(s)`, fields: { tags } });
  }
}
