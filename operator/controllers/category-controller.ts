import { kinds } from '../../crds/kinds.ts';
import type { CategorySpec } from '../../crds/schemas/category.ts';
import { splitKey } from '../runtime/gw-object.ts';
import { nextStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

/** The name APIs use to join a Category: spec.name, else metadata.name. */
export const categoryName = (spec: CategorySpec, metadataName: string): string => spec.name || metadataName;

/** Category status: how many ApiDefinitions of its namespace list it in `categories`. */
export class CategoryController {
  readonly kind = kinds.Category.kind;
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
  }

  async reconcile(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    const category = this.#ctx.caches.categories.get(namespace, name);
    if (!category || category.metadata.deletionTimestamp) return;
    const label = categoryName(category.spec, name);
    const count = this.#ctx.caches.apis.list(namespace).filter((api) => (api.spec.categories ?? []).includes(label)).length;
    const status = nextStatus(category, {
      ready: true,
      reason: 'Counted',
      message: `${count} API(s) in category ${label}`,
      fields: { apis: count },
    });
    if (status) await this.#ctx.status.write('Category', category, status);
  }
}
