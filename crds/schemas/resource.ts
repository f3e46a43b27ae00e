import { z } from 'zod';
import { apiVersion } from '../kinds.ts';
import { objectMetaSchema } from './common.ts';

/** A whole custom resource of one kind: what the API server returns and what manifests hold. */
export function resourceSchema<K extends string, Spec extends z.ZodType, Status extends z.ZodType>(
  kind: K,
  spec: Spec,
  status: Status,
) {
  return z.object({
    apiVersion: z.literal(apiVersion),
    kind: z.literal(kind),
    metadata: objectMetaSchema,
    spec,
    status: status.optional(),
  });
}
