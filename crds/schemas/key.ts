import { z } from 'zod';
import { keyHashPattern } from '../key-hash.ts';
import {
  accessRightsMap,
  bounds,
  displayText,
  idPattern,
  keyLimitFields,
  metaDataSchema,
  perPositiveRule,
  policyRefField,
  prefixedNameMaxLength,
  quotaField,
  ratePairRules,
  readyColumns,
  statusBaseFields,
  stringList,
  thresholdRule,
  unixTimeField,
  withRules,
} from './common.ts';
import { resourceSchema } from './resource.ts';

/**
 * Key (docs/behaviour.md#admin-operations): the key record, identified by the hex SHA-256 of the raw key. The raw
 * key is never stored here: a Key made with kubectl gets its raw key generated into a
 * Secret named in status.secretName, and its hash in status.key_hash.
 */

const limitRules = [...ratePairRules, perPositiveRule, thresholdRule];

const keyAccessRightSchema = z
  .object({
    api_id: z.string().max(128).optional().describe('api_id of the API; must equal the map key when set.'),
    api_name: z.string().max(bounds.name).optional().describe('Display name of the API (informational).'),
    versions: stringList(16, bounds.label).optional().describe('API versions granted (informational).'),
    limit: withRules(z.object(keyLimitFields), limitRules)
      .optional()
      .describe('Per-API limit of this key: consumed only by requests to this API.'),
  })
  .describe('Access to one API.');

export const keySpecSchema = withRules(
  z.object({
    key_hash: z
      .string()
      .max(64)
      .regex(new RegExp(keyHashPattern))
      .optional()
      .describe('Hex SHA-256 of the raw key (64 lower-case hex digits). Leave out to have the operator generate a key into a Secret.'),
    alias: displayText(bounds.name).optional().describe('Human-friendly name of the key, shown in logs instead of the hash.'),
    allowance: keyLimitFields.rate.describe('Set to the same value as rate.'),
    rate: keyLimitFields.rate,
    per: keyLimitFields.per,
    apply_policies: z
      .array(z.string().min(1).max(bounds.name).regex(new RegExp(idPattern), 'must be the name of a Policy'))
      .max(16)
      .optional()
      .describe('Names of Policies in this namespace applied to the key; with several, the highest rate/per wins.'),
    access_rights: accessRightsMap(keyAccessRightSchema)
      .optional()
      .describe('APIs the key may call, keyed by api_id, besides those its policies grant; on these alone its own limits apply.'),
    enable_detailed_recording: z.boolean().optional().describe('Kept in the key record, as the specification has it; this gateway records no request details for it.'),
    expires: unixTimeField.optional().describe('Unix time (seconds) after which the key is refused; 0 never expires.'),
    hmac_enabled: z.boolean().optional().describe('Kept in the key record, as the specification has it; this gateway does not check HMAC signatures: the raw key authenticates.'),
    is_inactive: z.boolean().optional().describe('true refuses the key without deleting it.'),
    meta_data: metaDataSchema
      .optional()
      .describe('Free-form session metadata; rate_limit_pattern references it as $gw_meta.FIELD.'),
    org_id: z.string().max(bounds.name).optional().describe('Organisation the key belongs to.'),
    quota_max: keyLimitFields.quota_max,
    quota_remaining: quotaField.optional().describe('Requests left in the current quota period.'),
    quota_renewal_rate: keyLimitFields.quota_renewal_rate,
    quota_renews: unixTimeField.optional().describe('Unix time (seconds) when the quota renews next.'),
    smoothing: keyLimitFields.smoothing,
    tags: stringList().optional().describe('Tags of the key.'),
    throttle_interval: keyLimitFields.throttle_interval,
    throttle_retry_limit: keyLimitFields.throttle_retry_limit,
  }),
  limitRules,
).describe('An access key. Its own limits apply where no applied policy grants the API; elsewhere its policies take precedence.');

export const keyStatusSchema = z
  .object({
    ...statusBaseFields,
    key_hash: z.string().max(64).regex(new RegExp(keyHashPattern)).optional().describe('Hash of the key in effect (spec.key_hash or the generated key).'),
    secretName: z.string().max(bounds.name).optional().describe('Secret holding the generated raw key (kubectl-made keys only).'),
    policies: z.array(policyRefField).max(16).optional().describe('Applied policies that exist (namespace/name).'),
    sessionStored: z
      .boolean()
      .optional()
      .describe('The session under key_hash was written to Redis: one found missing later was lost there (a SessionRestored Event).'),
  })
  .describe('What the operator observed and stored.');

export const keySchema = resourceSchema('Key', keySpecSchema, keyStatusSchema, prefixedNameMaxLength);

export type KeySpec = z.infer<typeof keySpecSchema>;
export type KeyStatus = z.infer<typeof keyStatusSchema>;
export type Key = z.infer<typeof keySchema>;

export const keyPrinterColumns = [
  { name: 'ALIAS', type: 'string', jsonPath: '.spec.alias' },
  { name: 'RATE', type: 'integer', jsonPath: '.spec.rate' },
  { name: 'PER', type: 'integer', jsonPath: '.spec.per' },
  { name: 'SECRET', type: 'string', jsonPath: '.status.secretName' },
  ...readyColumns,
  { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' },
] as const;
