import { z } from 'zod';
import { bounds, countField, readyColumns, statusBaseFields } from './common.ts';
import { resourceSchema } from './resource.ts';

/** Category (docs/behaviour.md#admin-operations): a named category that APIs join through `categories`. */

export const categorySpecSchema = z
  .object({
    name: z
      .string()
      .min(1)
      .max(bounds.label)
      .optional()
      .describe('Category name that ApiDefinitions list in `categories`; default: metadata.name.'),
    description: z.string().max(bounds.text).optional().describe('What the category groups, for people browsing the catalogue.'),
  })
  .describe('A category of APIs.');

export const categoryStatusSchema = z
  .object({
    ...statusBaseFields,
    apis: countField.optional().describe('Number of ApiDefinitions in this category.'),
    name: z.string().max(bounds.name).optional().describe('The category name in force: spec.name, or metadata.name where it is not set.'),
  })
  .describe('What the operator observed.');

export const categorySchema = resourceSchema('Category', categorySpecSchema, categoryStatusSchema);

export type CategorySpec = z.infer<typeof categorySpecSchema>;
export type CategoryStatus = z.infer<typeof categoryStatusSchema>;
export type Category = z.infer<typeof categorySchema>;

export const categoryPrinterColumns = [
  { name: 'CATEGORY', type: 'string', jsonPath: '.status.name' },
  { name: 'APIS', type: 'integer', jsonPath: '.status.apis' },
  ...readyColumns,
  { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' },
] as const;
