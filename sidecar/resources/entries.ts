import { z } from 'zod';
import { defaultApiId } from '../../crds/compile/api-id.ts';
import { apiDefinitionSpecSchema } from '../../crds/schemas/api-definition.ts';
import { categorySpecSchema } from '../../crds/schemas/category.ts';
import { objectMetaSchema } from '../../crds/schemas/common.ts';
import { portalProductSpecSchema } from '../../crds/schemas/portal-product.ts';
import type { ApiEntry, CategoryEntry } from './types.ts';

/**
 * Reading stored resources (API server objects or YAML documents) into what the admin
 * operations need. Reads are lenient on purpose: a resource whose other fields the compile
 * step rejects must still be found, so an operator can list or delete it. Field schemas
 * come from crds/ so the rules cannot drift.
 */

const apiShape = apiDefinitionSpecSchema.shape;

const apiView = z.object({
  metadata: objectMetaSchema,
  spec: z
    .object({
      api_id: apiShape.api_id.catch(undefined),
      categories: apiShape.categories.catch(undefined),
      oas: z.unknown().optional(),
    })
    .catch({ api_id: undefined, categories: undefined, oas: undefined }),
});

const categoryView = z.object({
  metadata: objectMetaSchema,
  spec: z.object({ name: categorySpecSchema.shape.name.catch(undefined) }).catch({ name: undefined }),
});

const productView = z.object({
  metadata: objectMetaSchema,
  spec: z
    .object({ id: portalProductSpecSchema.shape.id.catch(undefined), tags: portalProductSpecSchema.shape.tags.catch([]) })
    .catch({ id: undefined, tags: [] }),
});

export function apiEntryOf(object: unknown, fallbackNamespace: string): ApiEntry | null {
  const parsed = apiView.safeParse(object);
  if (!parsed.success) return null;
  const { metadata, spec } = parsed.data;
  const namespace = metadata.namespace ?? fallbackNamespace;
  return {
    apiId: spec.api_id ?? defaultApiId(namespace, metadata.name),
    namespace,
    name: metadata.name,
    oas: spec.oas !== undefined && spec.oas !== null,
    // A category listed twice is one category of the API, in both reads.
    categories: [...new Set(spec.categories ?? [])],
  };
}

export function categoryEntryOf(object: unknown, fallbackNamespace: string): CategoryEntry | null {
  const parsed = categoryView.safeParse(object);
  if (!parsed.success) return null;
  const { metadata, spec } = parsed.data;
  return { namespace: metadata.namespace ?? fallbackNamespace, name: spec.name ?? metadata.name };
}

export interface ProductView {
  namespace: string | undefined;
  name: string;
  /** `spec.id`, when the product gives one. */
  id: string | null;
  tags: { Name: string }[];
}

export function productOf(object: unknown): ProductView | null {
  const parsed = productView.safeParse(object);
  if (!parsed.success) return null;
  const { metadata, spec } = parsed.data;
  return { namespace: metadata.namespace, name: metadata.name, id: spec.id ?? null, tags: spec.tags };
}

/**
 * The product a path's product_id names: the one whose spec.id it is, else the one of that
 * metadata.name, so a product whose id is another's name is still reachable by its id. Ties go
 * to the first in list order.
 */
export function findProduct<T>(items: readonly T[], productId: string, view: (item: T) => ProductView | null): T | undefined {
  const viewed = items.map((item) => ({ item, product: view(item) }));
  return (
    viewed.find((v) => v.product?.id === productId)?.item ?? viewed.find((v) => v.product?.name === productId)?.item
  );
}
