import { z } from 'zod';
import { defaultApiId } from '../../crds/compile/api-id.ts';
import { apiDefinitionSpecSchema } from '../../crds/schemas/api-definition.ts';
import { categorySpecSchema } from '../../crds/schemas/category.ts';
import { objectMetaSchema } from '../../crds/schemas/common.ts';
import { portalProductSpecSchema } from '../../crds/schemas/portal-product.ts';
import { createdMsOf, type ProductAddress } from '../../crds/product-id.ts';
import type { ApiEntry, CategoryEntry } from './types.ts';

/**
 * Reading stored resources (API server objects or YAML documents) into what the admin
 * operations need. Reads are lenient on purpose: a resource whose other fields the compile
 * step rejects must still be found, so an operator can list or delete it. Field schemas
 * come from crds/ so the rules cannot drift.
 */

const apiShape = apiDefinitionSpecSchema.shape;

const apiView = z.object({
  metadata: objectMetaSchema.extend({ creationTimestamp: z.string().optional().catch(undefined) }),
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
  metadata: objectMetaSchema.extend({ creationTimestamp: z.string().optional().catch(undefined) }),
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
    createdMs: createdMsOf(metadata.creationTimestamp),
  };
}

export function categoryEntryOf(object: unknown, fallbackNamespace: string): CategoryEntry | null {
  const parsed = categoryView.safeParse(object);
  if (!parsed.success) return null;
  const { metadata, spec } = parsed.data;
  return { namespace: metadata.namespace ?? fallbackNamespace, name: spec.name ?? metadata.name };
}

export interface ProductView extends ProductAddress {
  tags: { Name: string }[];
}

export function productOf(object: unknown): ProductView | null {
  const parsed = productView.safeParse(object);
  if (!parsed.success) return null;
  const { metadata, spec } = parsed.data;
  return { namespace: metadata.namespace, name: metadata.name, id: spec.id ?? null, createdMs: createdMsOf(metadata.creationTimestamp), tags: spec.tags };
}

