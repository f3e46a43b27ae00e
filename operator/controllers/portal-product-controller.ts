import { kinds } from '../../crds/kinds.ts';
import { splitKey } from '../runtime/gw-object.ts';
import { nextStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

/** PortalProduct status: its tag count (tag names are unique by the CRD's list-map schema). */
export class PortalProductController {
  readonly kind = kinds.PortalProduct.kind;
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
  }

  async reconcile(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    const product = this.#ctx.caches.products.get(namespace, name);
    if (!product || product.metadata.deletionTimestamp) return;
    const tags = product.spec.tags.length;
    const status = nextStatus(product, { ready: true, reason: 'Valid', message: `${tags} tag(s)`, fields: { tags } });
    if (status) await this.#ctx.status.write('PortalProduct', product, status);
  }
}
