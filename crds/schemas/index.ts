import type { z } from 'zod';
import { kinds, type KindInfo, type KindName } from '../kinds.ts';
import { apiDefinitionPrinterColumns, apiDefinitionSchema, apiDefinitionSpecSchema, apiDefinitionStatusSchema } from './api-definition.ts';
import { categoryPrinterColumns, categorySchema, categorySpecSchema, categoryStatusSchema } from './category.ts';
import { keyPrinterColumns, keySchema, keySpecSchema, keyStatusSchema } from './key.ts';
import { policyPrinterColumns, policySchema, policySpecSchema, policyStatusSchema } from './policy.ts';
import { portalProductPrinterColumns, portalProductSchema, portalProductSpecSchema, portalProductStatusSchema } from './portal-product.ts';

export * from './api-definition.ts';
export * from './category.ts';
export * from './key.ts';
export * from './policy.ts';
export * from './portal-product.ts';

export interface PrinterColumn {
  readonly name: string;
  readonly type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  readonly jsonPath: string;
  /** 1: shown only by `kubectl get -o wide`. */
  readonly priority?: 0 | 1;
}

/** Everything the CRD generator needs about one kind. */
export interface KindSource {
  info: KindInfo;
  /** `metadata.name`, whose bound the CRD carries where it is below the API server's. */
  name: z.ZodString;
  spec: z.ZodType;
  status: z.ZodType;
  columns: readonly PrinterColumn[];
}

export const kindSources: readonly KindSource[] = [
  { info: kinds.ApiDefinition, name: apiDefinitionSchema.shape.metadata.shape.name, spec: apiDefinitionSpecSchema, status: apiDefinitionStatusSchema, columns: apiDefinitionPrinterColumns },
  { info: kinds.Policy, name: policySchema.shape.metadata.shape.name, spec: policySpecSchema, status: policyStatusSchema, columns: policyPrinterColumns },
  { info: kinds.Key, name: keySchema.shape.metadata.shape.name, spec: keySpecSchema, status: keyStatusSchema, columns: keyPrinterColumns },
  { info: kinds.Category, name: categorySchema.shape.metadata.shape.name, spec: categorySpecSchema, status: categoryStatusSchema, columns: categoryPrinterColumns },
  { info: kinds.PortalProduct, name: portalProductSchema.shape.metadata.shape.name, spec: portalProductSpecSchema, status: portalProductStatusSchema, columns: portalProductPrinterColumns },
];

/** Whole-resource schema per kind: validates a manifest or an object read from the API server. */
export const resourceSchemas = {
  ApiDefinition: apiDefinitionSchema,
  Policy: policySchema,
  Key: keySchema,
  Category: categorySchema,
  PortalProduct: portalProductSchema,
} as const satisfies Record<KindName, z.ZodType>;
