import { createdMsOf, productNamed, type ProductAddress } from '../../crds/product-id.ts';
import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { forObjects, requestFor, specChanged, watches, type Watch, type WatchEvent } from '../kit/watch.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import type { ControllerContext } from './context.ts';

type Product = GwObject<'PortalProduct'>;

const addressOf = ({ metadata, spec }: Product): ProductAddress => ({
  namespace: metadata.namespace,
  name: metadata.name,
  id: spec.id ?? null,
  createdMs: createdMsOf(metadata.creationTimestamp),
});

/** The `product_id` a tag path reaches a product by: its `spec.id`, else its name. */
const productIdOf = (product: Product): string => product.spec.id ?? product.metadata.name;

/**
 * PortalProduct status: its tag count (tag names are unique by the CRD's list-map schema), or
 * `DuplicateProductId` when the tag operation, asked for this product's id, reaches another
 * product (crds/product-id.ts).
 */
export class PortalProductController implements KindController {
  readonly kind = 'PortalProduct';
  readonly watches: Watch[];
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    const { products } = ctx.caches;
    const { productsByProductId } = ctx.indexes;
    // A product that comes, goes or changes its id changes which product every id it had or
    // has (as an id or a name) reaches: the other products answering to those are looked at again.
    const sharing = (event: WatchEvent<Product>): Request[] => {
      if (!specChanged(event)) return [];
      const ids = new Set<string>();
      for (const product of [event.object, event.old]) if (product) ids.add(productIdOf(product)).add(product.metadata.name);
      const changed = event.object.metadata;
      return [...ids]
        .flatMap((id) => productsByProductId.get(id))
        .filter((p) => p.metadata.namespace !== changed.namespace || p.metadata.name !== changed.name)
        .map(requestFor);
    };
    this.watches = [forObjects(products), watches(products, sharing)];
  }

  async reconcile({ namespace, name }: Request): Promise<void> {
    const product = this.#ctx.caches.products.get(namespace, name);
    if (!product || product.metadata.deletionTimestamp) return;
    const tags = product.spec.tags.length;
    const productId = productIdOf(product);
    const reached = productNamed(this.#ctx.indexes.productsByProductId.get(productId), productId, addressOf);
    const { namespace: at = '', name: other } = reached?.metadata ?? product.metadata;
    if (at !== namespace || other !== name) {
      const message = `product_id "${productId}" reaches PortalProduct ${at}/${other}, which tags posted to it are added to`;
      await setStatus(this.#ctx, 'PortalProduct', product, { ready: false, reason: 'DuplicateProductId', message, fields: { tags, id: productId } });
      return;
    }
    await setStatus(this.#ctx, 'PortalProduct', product, { ready: true, reason: 'Valid', message: `${tags} tag(s)`, fields: { tags, id: productId } });
  }
}
