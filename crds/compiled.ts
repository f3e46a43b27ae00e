import { z } from 'zod';
import { linearTimeRefusal } from './compile/path-regex.ts';
import { gatewaySettingsSchema } from './settings.ts';

/**
 * The compiled configuration one sidecar runs: the output of the pure compile step
 * (crds/compile), written by the operator into one ConfigMap per ApiDefinition and
 * read back by sidecars. Every default is applied and every reference is resolved here,
 * so the sidecar never re-derives anything on the request path.
 *
 * Matchers are regular-expression sources, already anchored (`^...$`), in evaluation
 * order; `method` is upper case or `*` for any method.
 */

export const compiledRateSchema = z.object({
  rate: z.number().int().min(1),
  /** Window length in seconds (OAS duration strings are converted at compile time). */
  per: z.number().positive(),
});
export type CompiledRate = z.infer<typeof compiledRateSchema>;

export const compiledSmoothingSchema = z.object({
  enabled: z.boolean(),
  threshold: z.number().int().min(1),
  step: z.number().int().min(1),
  trigger: z.number().positive(),
  delay: z.number().int().min(0),
});
export type CompiledSmoothing = z.infer<typeof compiledSmoothingSchema>;

/**
 * An anchored path pattern, one the sidecar can match in linear time (crds/compile/path-regex.ts).
 * A ConfigMap compiled before the compile step refused the others is refused here too, rather
 * than served with a pattern one request could stop the gateway with.
 */
const compiledPatternSchema = z.string().refine((pattern) => linearTimeRefusal(pattern) === null, {
  message: 'the path pattern could take exponential time to match; the ApiDefinition or Policy must be fixed (InvalidRegex)',
});

export const compiledEndpointLimitSchema = compiledRateSchema.extend({
  /** The path as the user wrote it (for messages and limiter key identity). */
  path: z.string(),
  pattern: compiledPatternSchema,
  method: z.string(),
});
export type CompiledEndpointLimit = z.infer<typeof compiledEndpointLimitSchema>;

export const compiledMatcherSchema = z.object({
  path: z.string(),
  pattern: compiledPatternSchema,
  method: z.string(),
});
export type CompiledMatcher = z.infer<typeof compiledMatcherSchema>;

export const compiledStreamLimitSchema = z.object({
  label: z.string(),
  count: z.number().int().min(1),
  interval_ms: z.number().int().min(1),
});
export type CompiledStreamLimit = z.infer<typeof compiledStreamLimitSchema>;

/** Identity of the custom resource a compiled object came from (Events point at it). */
export const resourceRefSchema = z.object({
  kind: z.string(),
  namespace: z.string(),
  name: z.string(),
  uid: z.string().optional(),
});
export type ResourceRef = z.infer<typeof resourceRefSchema>;

/**
 * The order APIs load in, by api_id in UTF-16 code units (`Array.prototype.sort`'s own), the
 * same in folder and Kubernetes mode and whatever the process's locale: of two APIs on one
 * listen path, the first loaded is served (docs/behaviour.md#routing).
 */
export const byApiId = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

export const compiledApiSchema = z.object({
  api_id: z.string().min(1),
  name: z.string(),
  source: resourceRefSchema,
  active: z.boolean(),
  keyless: z.boolean(),
  auth_header_name: z.string().min(1),
  listen_path: z.string().startsWith('/'),
  target_url: z.url(),
  strip_listen_path: z.boolean(),
  /** API-level limit; null when disabled (`disable_rate_limit`, or rate and per both 0). */
  api_limit: compiledRateSchema.nullable(),
  /** API-level per-endpoint limits, enabled ones only, in evaluation order (first match wins). */
  endpoint_limits: z.array(compiledEndpointLimitSchema),
  /** Endpoints served without authentication (the ignore-authentication middleware). */
  ignored: z.array(compiledMatcherSchema),
  categories: z.array(z.string()),
  /** The stream rate-limit resource named by `proxy.rate_limit`, resolved. */
  stream_limit: compiledStreamLimitSchema.nullable(),
  /** Smoothing of the API-level limit (from `access_rights[*].limit` of docs/behaviour.md#smoothing), if any. */
  smoothing: compiledSmoothingSchema.nullable(),
});
export type CompiledApi = z.infer<typeof compiledApiSchema>;

/** Limit fields shared by a policy and by a policy's per-API `limit`. */
export const compiledKeyLimitSchema = z.object({
  /** null: no rate limit at this scope. */
  rate: compiledRateSchema.nullable(),
  quota_max: z.number().int(),
  quota_renewal_rate: z.number().int(),
  throttle_interval: z.number().int(),
  throttle_retry_limit: z.number().int(),
  smoothing: compiledSmoothingSchema.nullable(),
});
export type CompiledKeyLimit = z.infer<typeof compiledKeyLimitSchema>;

export const compiledAccessRightSchema = z.object({
  api_id: z.string(),
  api_name: z.string(),
  /** Per-API limit; null when the policy's global limit covers this API. */
  limit: compiledKeyLimitSchema.nullable(),
  /** Key-level per-endpoint limits in evaluation order. */
  endpoints: z.array(compiledEndpointLimitSchema),
});
export type CompiledAccessRight = z.infer<typeof compiledAccessRightSchema>;

export const compiledPolicySchema = compiledKeyLimitSchema.extend({
  /** `namespace/name`: how a key's `apply_policies` entry resolves. */
  id: z.string(),
  source: resourceRefSchema,
  meta_data: z.record(z.string(), z.unknown()),
  rate_limit_pattern: z.string().nullable(),
  tags: z.array(z.string()),
  access_rights: z.record(z.string(), compiledAccessRightSchema),
});
export type CompiledPolicy = z.infer<typeof compiledPolicySchema>;

export const compiledConfigSchema = z.object({
  version: z.literal(1),
  settings: gatewaySettingsSchema,
  apis: z.array(compiledApiSchema),
  /** Keyed by policy id (`namespace/name`). */
  policies: z.record(z.string(), compiledPolicySchema),
});
export type CompiledConfig = z.infer<typeof compiledConfigSchema>;
