import { z } from 'zod';
import { apiVersion } from '../kinds.ts';
import { objectMetaSchema } from './common.ts';

/**
 * A whole custom resource of one kind: what the API server returns and what manifests hold.
 * `maxNameLength`: a bound on `metadata.name` below the API server's own (the kind's CRD has it too).
 */
export function resourceSchema<K extends string, Spec extends z.ZodType, Status extends z.ZodType>(
  kind: K,
  spec: Spec,
  status: Status,
  maxNameLength?: number,
) {
  return z.object({
    apiVersion: z.literal(apiVersion),
    kind: z.literal(kind),
    metadata: maxNameLength === undefined ? objectMetaSchema : objectMetaSchema.extend({ name: z.string().min(1).max(maxNameLength) }),
    spec,
    status: status.optional(),
  });
}
