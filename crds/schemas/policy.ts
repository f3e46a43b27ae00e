import { z } from 'zod';
import {
  accessRightsMap,
  bounds,
  countField,
  httpMethodSchema,
  keyLimitFields,
  perPositiveRule,
  perSecondsField,
  rateLimitPatternField,
  ratePairRules,
  rateField,
  readyColumns,
  statusBaseFields,
  stringList,
  thresholdRule,
  withRules,
} from './common.ts';
import { resourceSchema } from './resource.ts';

/** Policy (docs/behaviour.md#evaluation-order, docs/behaviour.md#several-policies-on-one-key, docs/behaviour.md#limits-and-their-scopes, docs/behaviour.md#custom-rate-limit-keys): limits, quotas and access rights shared by the keys that apply it. */

const limitRules = [...ratePairRules, perPositiveRule, thresholdRule];

const endpointMethodSchema = z
  .object({
    name: httpMethodSchema.describe('HTTP method; "*" for any.'),
    limit: withRules(
      z.object({
        rate: rateField.describe('Requests each key may make per `per` seconds to this endpoint.'),
        per: perSecondsField.describe('Window length in seconds; greater than 0 when rate is greater than 0.'),
      }),
      [perPositiveRule],
    ).describe('Key-level per-endpoint limit; each key has its own allowance.'),
  })
  .describe('A method of the endpoint and its limit.');

const endpointSchema = z
  .object({
    path: z
      .string()
      .min(1)
      .max(bounds.path)
      .describe('Path relative to the API listen path, matched in full; a regular expression, "{name}" segments match like "(.*)". One that could take more than linear time (a backreference, a lookahead, a counted repetition over 16) is refused (reason InvalidRegex).'),
    methods: z.array(endpointMethodSchema).min(1).max(10).describe('Methods of the endpoint with their limits.'),
  })
  .describe('Key-level per-endpoint limits for one path. The endpoint must not be an ignored (no-auth) endpoint of the API.');

const accessRightSchema = z
  .object({
    api_id: z.string().max(128).optional().describe('api_id of the granted ApiDefinition; must equal the map key when set.'),
    api_name: z.string().max(bounds.name).optional().describe('Display name of the API (informational).'),
    limit: withRules(z.object(keyLimitFields), limitRules)
      .optional()
      .describe('Per-API limit: consumed only by requests to this API, independently per key. Absent: the policy-wide limit covers this API.'),
    endpoints: z
      .array(endpointSchema)
      .max(bounds.endpoints)
      .optional()
      .describe('Key-level per-endpoint limits for this API, in evaluation order.'),
  })
  .describe('Access to one API.');

const policyMetaDataSchema = z
  .object({
    rate_limit_pattern: rateLimitPatternField.optional(),
  })
  .loose()
  .describe('Free-form metadata of the policy.');

export const policySpecSchema = withRules(
  z.object({
    ...keyLimitFields,
    meta_data: policyMetaDataSchema.optional(),
    tags: stringList().optional().describe('Tags copied to the keys that apply the policy.'),
    access_rights: accessRightsMap(accessRightSchema)
      .default({})
      .describe('APIs the policy grants, keyed by their api_id.'),
  }),
  limitRules,
).describe(
  'Limits, quota and access rights applied to every key that names this policy in apply_policies. The global limit (rate/per) is shared by all APIs the policy grants, per key.',
);

export const policyStatusSchema = z
  .object({
    ...statusBaseFields,
    apis: stringList(bounds.accessRights, 128).optional().describe('api_ids of the granted APIs that exist.'),
    keys: countField.optional().describe('Number of Keys that apply this policy.'),
  })
  .describe('What the operator observed and compiled.');

export const policySchema = resourceSchema('Policy', policySpecSchema, policyStatusSchema);

export type PolicySpec = z.infer<typeof policySpecSchema>;
export type PolicyStatus = z.infer<typeof policyStatusSchema>;
export type Policy = z.infer<typeof policySchema>;
export type PolicyAccessRight = z.infer<typeof accessRightSchema>;

export const policyPrinterColumns = [
  { name: 'RATE', type: 'integer', jsonPath: '.spec.rate' },
  { name: 'PER', type: 'integer', jsonPath: '.spec.per' },
  { name: 'QUOTA', type: 'integer', jsonPath: '.spec.quota_max' },
  { name: 'KEYS', type: 'integer', jsonPath: '.status.keys' },
  ...readyColumns,
  { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' },
] as const;
