import { z } from 'zod';
import { isRecord } from '../../crds/is-record.ts';
import { keySpecSchema, type KeySpec } from '../../crds/schemas/key.ts';
import { AdminError, adminErrors } from './errors.ts';
import { validBody } from './request.ts';

/**
 * The create-key body: the request fields of docs/behaviour.md#admin-operations with the Key resource's own field
 * schemas (types, bounds), plus the Key's `access_rights` and `smoothing` so a key without
 * policies can be useful. Unknown fields are refused, so a misspelt field is an error
 * rather than a silently ignored setting.
 */
const spec = keySpecSchema.shape;

export const createKeyRequestSchema = z
  .object({
    alias: spec.alias,
    allowance: spec.allowance,
    apply_policies: spec.apply_policies,
    enable_detailed_recording: spec.enable_detailed_recording,
    expires: spec.expires,
    hmac_enabled: spec.hmac_enabled,
    is_inactive: spec.is_inactive,
    meta_data: spec.meta_data,
    org_id: spec.org_id,
    per: spec.per,
    quota_max: spec.quota_max,
    quota_remaining: spec.quota_remaining,
    quota_renewal_rate: spec.quota_renewal_rate,
    quota_renews: spec.quota_renews,
    rate: spec.rate,
    tags: spec.tags,
    throttle_interval: spec.throttle_interval,
    throttle_retry_limit: spec.throttle_retry_limit,
    access_rights: spec.access_rights,
    smoothing: spec.smoothing,
  })
  .strict();

/**
 * The Key resource spec for a request: its fields and the hash, checked field by field
 * and then against the Key's cross-field rules (rate with per, threshold ≤ rate, …). A
 * key that grants no API (no access rights, no policies) would be refused on every call,
 * so it is refused here instead of being stored.
 */
export function keySpecOf(body: unknown, keyHash: string): KeySpec {
  const request = validBody(createKeyRequestSchema, body);
  // Nested objects (an access right, its limit, smoothing) drop what they do not know when parsed.
  const dropped = droppedField(body, request, []);
  if (dropped !== null) throw new AdminError(adminErrors.bodyInvalid, `${dropped}: unknown field`);
  const spec = validBody(keySpecSchema, { ...request, key_hash: keyHash });
  const grantsNothing = Object.keys(spec.access_rights ?? {}).length === 0 && (spec.apply_policies ?? []).length === 0;
  if (grantsNothing) throw new AdminError(adminErrors.keyWithoutAccess);
  return spec;
}

/**
 * The first field of `raw` that parsing left out of `parsed`, at any depth, as a dotted path;
 * null when there is none. Records (`meta_data`, `access_rights`) keep every key, so what is
 * found is a field an object schema does not know. readJsonBody bounds the recursion's depth.
 */
function droppedField(raw: unknown, parsed: unknown, path: readonly string[]): string | null {
  if (Array.isArray(raw) && Array.isArray(parsed)) {
    for (let i = 0; i < raw.length; i++) {
      const found = droppedField(raw[i], parsed[i], [...path, String(i)]);
      if (found !== null) return found;
    }
    return null;
  }
  if (!isRecord(raw) || !isRecord(parsed)) return null;
  for (const key of Object.keys(raw)) {
    if (!Object.hasOwn(parsed, key)) return [...path, key].join('.');
    const found = droppedField(raw[key], parsed[key], [...path, key]);
    if (found !== null) return found;
  }
  return null;
}
