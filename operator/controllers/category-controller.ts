import type { CategorySpec } from '../../crds/schemas/category.ts';
import { apiIdOf } from '../config/compile-api.ts';
import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { forObjects, requestFor, specChanged, watches, type Watch } from '../kit/watch.ts';
import type { ControllerContext } from './context.ts';

/** The name APIs use to join a Category: spec.name, else metadata.name. */
export const categoryName = (spec: CategorySpec, metadataName: string): string => spec.name || metadataName;

/** Category status: how many APIs (api_ids) of its namespace list it in `categories`. */
export class CategoryController implements KindController {
  readonly kind = 'Category';
  readonly watches: Watch[];
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    const { apis, categories } = ctx.caches;
    this.watches = [
      forObjects(categories),
      // Categories an API left must recount too, and the old spec may not list them: recount the namespace's.
      watches(apis, (event) => (specChanged(event) ? categories.list(event.object.metadata.namespace).map(requestFor) : [])),
    ];
  }

  async reconcile({ namespace, name }: Request): Promise<void> {
    const category = this.#ctx.caches.categories.get(namespace, name);
    if (!category || category.metadata.deletionTimestamp) return;
    const label = categoryName(category.spec, name);
    // One API per api_id: a copy refused as DuplicateApiId lists the category but is no API of its own.
    const count = new Set(this.#ctx.indexes.apisByCategory.get(label, namespace).map(apiIdOf)).size;
    await setStatus(this.#ctx, 'Category', category, { ready: true, reason: 'Counted', message: `${count} API(s) in category ${label}`, fields: { apis: count, name: label } });
  }
}
