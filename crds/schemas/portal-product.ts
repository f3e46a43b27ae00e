import { z } from 'zod';
import { bounds, countField, idPattern, listMap, readyColumns, statusBaseFields } from './common.ts';
import { resourceSchema } from './resource.ts';

/** PortalProduct (docs/behaviour.md#admin-operations): a developer-portal product and its tags. */

const tagSchema = z
  .object({ Name: z.string().min(1).max(bounds.label).regex(/\S/, 'must not be blank').describe('Tag name: not blank.') })
  .describe('A tag.');

/** The most tags a product may have: the tag operation refuses one more (docs/behaviour.md#admin-operations). */
export const PRODUCT_MAX_TAGS = bounds.smallList;

export const portalProductSpecSchema = z
  .object({
    id: z
      .string()
      .min(1)
      .max(128)
      .regex(new RegExp(idPattern))
      .optional()
      .describe('Product id used by POST /portal-api/products/{product_id}/tags; default: metadata.name. Of several products with one id, the oldest is tagged and the others are DuplicateProductId.'),
    name: z.string().max(bounds.name).optional().describe('Display name of the product.'),
    tags: listMap(tagSchema, 'Name', PRODUCT_MAX_TAGS)
      .default([])
      .describe('Tags of the product; names are unique.'),
  })
  .describe('A developer-portal product.');

export const portalProductStatusSchema = z
  .object({
    ...statusBaseFields,
    tags: countField.optional().describe('Number of tags on the product.'),
    id: z.string().max(bounds.name).optional().describe('The product id in force: spec.id, or metadata.name where it is not set.'),
  })
  .describe('What the operator observed.');

export const portalProductSchema = resourceSchema('PortalProduct', portalProductSpecSchema, portalProductStatusSchema);

export type PortalProductStatus = z.infer<typeof portalProductStatusSchema>;
export type PortalProduct = z.infer<typeof portalProductSchema>;

export const portalProductPrinterColumns = [
  { name: 'ID', type: 'string', jsonPath: '.status.id' },
  { name: 'PRODUCT', type: 'string', jsonPath: '.spec.name' },
  { name: 'TAGS', type: 'integer', jsonPath: '.status.tags' },
  ...readyColumns,
  { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' },
] as const;
