import { z } from 'zod';
import { compiledSmoothingSchema } from './compiled.ts';

/**
 * The session of a key (docs/behaviour.md#limits-and-their-scopes, docs/behaviour.md#admin-operations response `data`): what the operator and the
 * admin create-key operation store in Redis under the key's hash, and what the sidecar
 * loads to authenticate a request. It never holds the raw key.
 */

export { smoothingSchema, type Smoothing } from './schemas/common.ts';

export const sessionAccessRightSchema = z.object({
  api_id: z.string(),
  api_name: z.string().default(''),
  versions: z.array(z.string()).default([]),
  limit: z
    .object({
      rate: z.number().int().min(0).default(0),
      per: z.number().min(0).default(0),
      quota_max: z.number().int().default(-1),
      quota_renewal_rate: z.number().int().default(0),
      throttle_interval: z.number().int().default(0),
      throttle_retry_limit: z.number().int().default(0),
      smoothing: compiledSmoothingSchema.nullable().default(null),
    })
    .nullable()
    .default(null),
});
export type SessionAccessRight = z.infer<typeof sessionAccessRightSchema>;

export const sessionSchema = z.object({
  access_rights: z.record(z.string(), sessionAccessRightSchema).default({}),
  alias: z.string().default(''),
  allowance: z.number().int().default(0),
  apply_policies: z.array(z.string()).default([]),
  apply_policy_id: z.string().default(''),
  basic_auth_data: z
    .object({ hash_type: z.string(), password: z.string(), user: z.string() })
    .default({ hash_type: '', password: '', user: '' }),
  certificate: z.string().default(''),
  data_expires: z.number().int().default(0),
  date_created: z.string().default(''),
  enable_detailed_recording: z.boolean().default(false),
  expires: z.number().int().default(0),
  hmac_enabled: z.boolean().default(false),
  hmac_string: z.string().default(''),
  id_extractor_deadline: z.number().int().default(0),
  is_inactive: z.boolean().default(false),
  jwt_data: z.object({ secret: z.string() }).default({ secret: '' }),
  key_id: z.string().default(''),
  last_check: z.number().int().default(0),
  last_updated: z.string().default(''),
  max_query_depth: z.number().int().default(0),
  meta_data: z.record(z.string(), z.unknown()).default({}),
  monitor: z.object({ trigger_limits: z.array(z.number()) }).default({ trigger_limits: [] }),
  oauth_client_id: z.string().default(''),
  oauth_keys: z.record(z.string(), z.unknown()).default({}),
  org_id: z.string().default(''),
  per: z.number().int().min(0).default(0),
  rate: z.number().int().min(0).default(0),
  quota_max: z.number().int().default(-1),
  quota_remaining: z.number().int().default(0),
  quota_renewal_rate: z.number().int().default(0),
  quota_renews: z.number().int().default(0),
  session_lifetime: z.number().int().default(0),
  smoothing: compiledSmoothingSchema.nullable().default(null),
  tags: z.array(z.string()).default([]),
  throttle_interval: z.number().int().default(0),
  throttle_retry_limit: z.number().int().default(0),
  /**
   * gw extension: namespace of the Key resource, so `apply_policies` names resolve to
   * policies of that namespace (`namespace/name`).
   */
  namespace: z.string().default('default'),
  /**
   * gw extension: uid of the Key resource, which the operator sets once the resource exists,
   * so the key's smoothing Events name it (`kubectl describe gwkey` selects Events by uid).
   */
  key_uid: z.string().default(''),
});
export type Session = z.infer<typeof sessionSchema>;
/** A session before its defaults are filled in: what `sessionSchema` parses. */
export type SessionInput = z.input<typeof sessionSchema>;

const appliedCache = new WeakMap<Session, readonly string[]>();

/**
 * Ids (`namespace/name`) of the policies a session applies: `apply_policies` plus the
 * older single `apply_policy_id`, once each. Access and limits both read this one list,
 * so a policy that grants a key an API always brings its limits along. Kept per session
 * object, which the session cache shares between requests.
 */
export function appliedPolicyIds(session: Session): readonly string[] {
  let ids = appliedCache.get(session);
  if (ids === undefined) {
    const names = session.apply_policy_id ? [...session.apply_policies, session.apply_policy_id] : session.apply_policies;
    ids = [...new Set(names)].map((name) => `${session.namespace}/${name}`);
    appliedCache.set(session, ids);
  }
  return ids;
}
