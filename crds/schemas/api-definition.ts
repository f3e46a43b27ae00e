import { z } from 'zod';
import { durationPattern, durationRegex, maxDurationMs, parseDuration } from '../duration.ts';
import {
  idPattern,
  bounds,
  positiveCountField,
  type CrossFieldRule,
  httpMethodSchema,
  listMap,
  perPositiveRule,
  policyRefField,
  prefixedNameMaxLength,
  perSecondsField,
  rateField,
  ratePairRules,
  readyColumns,
  smoothingSchema,
  statusBaseFields,
  stringList,
  thresholdRule,
  withRules,
} from './common.ts';
import { resourceSchema } from './resource.ts';

/** ApiDefinition (docs/behaviour.md#limits-and-their-scopes, docs/behaviour.md#the-stream-rate-limit-resource, docs/behaviour.md#api-states): a classic definition or an OAS document, never both. */

const apiIdSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(new RegExp(idPattern))
  .describe(
    'Identifier of the API in policies, keys, the admin API and compiled config. Default: the first 24 hex digits of sha256("<namespace>/<name>").',
  );

const listenPathSchema = z
  .string()
  .min(1)
  .max(bounds.path)
  .regex(/^\/[^\s]*$/);

// The pattern puts the scheme in the CRD too, so the API server refuses another at apply time.
// A user or password is refused there too: it would be a secret in a resource, which the
// gateway would not send anyway (docs/behaviour.md#what-the-upstream-receives).
const targetUrlSchema = z
  .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
  .max(bounds.url)
  .regex(/^[Hh][Tt][Tt][Pp][Ss]?:\/\/[^/?#@]*(?:[/?#]|$)/, 'must be an http:// or https:// URL naming no user or password (give the upstream its credentials another way)');

// No minimum length: the pattern already needs a number and its unit, and its message shows
// that form for "1", where a length rule's "at least 2 chars long" would not say why.
const durationSchema = z.string().max(32).regex(durationRegex);

/** The longest window as CEL's `duration()` reads it: `maxDurationMs` in hours. */
const maxDurationCel = `duration('${maxDurationMs / 3_600_000}h')`;

/**
 * A duration field's value within `[min, the longest window]`, judged when the object is applied
 * rather than only by the compile step afterwards (CEL's `duration()` reads the same syntax as
 * `parseDuration`). A text that is no duration at all is the pattern's to report, so the rule
 * holds for it and says nothing twice.
 */
function durationWithin<F extends string, T extends Record<F, string>>(rule: {
  field: F;
  min: { cel: string; holds: (ms: number) => boolean };
  message: string;
  when?: { cel: string; holds: (object: T) => boolean };
}): CrossFieldRule<T> {
  const { field, min, message, when } = rule;
  const text = `self.${field}`;
  // Absent (the API server checks a field's `default: {}` too, before defaults fill it in) or no duration.
  const notDuration = `!has(${text}) || !${text}.matches('${durationPattern.replaceAll('\\', '\\\\')}')`;
  const within = `(duration(${text}) ${min.cel} && duration(${text}) <= ${maxDurationCel})`;
  return {
    rule: when === undefined ? `${notDuration} || ${within}` : `!(${when.cel}) || ${notDuration} || ${within}`,
    message,
    field: `.${field}`,
    holds: (object) => {
      if (when !== undefined && !when.holds(object)) return true;
      const parsed = parseDuration(object[field]);
      // Unparsed: out of bounds (over the longest window) is this rule's, no duration at all the pattern's.
      return parsed.ok ? min.holds(parsed.ms) : !durationRegex.test(object[field]);
    },
  };
}

/** A stream resource's interval: at least 1ms, as the local limiter counts in whole ms. */
const intervalRule = durationWithin<'interval', { interval: string }>({
  field: 'interval',
  min: { cel: ">= duration('1ms')", holds: (ms) => ms >= 1 },
  message: 'interval must be at least 1ms and at most 8760h',
});

/**
 * An OAS limit's window, where the limit is in effect: at least 1ms (docs/behaviour.md#limits-and-their-scopes),
 * as the limiters count in whole ms: a window of 100ns would never hold a request.
 */
const oasPerRule = durationWithin<'per', { enabled: boolean; rate: number; per: string }>({
  field: 'per',
  min: { cel: ">= duration('1ms')", holds: (ms) => ms >= 1 },
  message: 'per must be at least 1ms and at most 8760h when the limit is enabled with a rate above 0',
  when: { cel: '(!has(self.enabled) || self.enabled) && self.rate > 0', holds: (limit) => limit.enabled && limit.rate > 0 },
});

const endpointPathSchema = z
  .string()
  .min(1)
  .max(bounds.path)
  .describe(
    'Path relative to the listen path, matched in full. A regular expression (e.g. "/users/[0-9]+" or "/.*"); "{name}" segments match like "(.*)". A regex that does not compile, or could take more than linear time (a backreference, a lookahead, a counted repetition over 16), makes the ApiDefinition not Ready (reason InvalidRegex).',
  );

const endpointRateLimitSchema = withRules(
  z.object({
    path: endpointPathSchema,
    method: httpMethodSchema.describe('HTTP method the rule applies to; "*" for any.'),
    enabled: z.boolean().default(true).describe('Whether the rule is in effect.'),
    rate: rateField.describe('Requests allowed per `per` seconds on this endpoint, for all clients together.'),
    per: perSecondsField.describe('Window length in seconds; greater than 0 when rate is greater than 0.'),
  }),
  [perPositiveRule],
).describe('API-level per-endpoint limit. Rules are evaluated in array order; the first match applies.');

const ignoredEndpointSchema = z
  .object({
    path: endpointPathSchema,
    method: httpMethodSchema.default('*').describe('HTTP method served without authentication; "*" (default) for any.'),
  })
  .describe('Endpoint served without authentication (ignore-authentication middleware). It must not carry a key-level per-endpoint limit.');

const globalRateLimitSchema = withRules(
  z.object({
    rate: rateField.optional().describe('Requests allowed per `per` seconds for all clients of the API together. rate and per both 0 disable the limit.'),
    per: perSecondsField.optional().describe('Window length in seconds; greater than 0 when rate is greater than 0.'),
    smoothing: smoothingSchema.optional(),
  }),
  [...ratePairRules, perPositiveRule, thresholdRule],
).describe('API-level rate limit, shared by every client of the API.');

const rateLimitResourceSchema = z
  .object({
    label: z.string().max(bounds.label).default('').describe('Name that `proxy.rate_limit` references.'),
    local: withRules(
      z.object({
        count: positiveCountField.default(1000).describe('Maximum upstream calls per interval (default 1000).'),
        interval: durationSchema.default('1s').describe('Window as a duration string such as "1s" or "500ms" (default "1s"): at least 1ms, at most 8760h.'),
      }),
      [intervalRule],
    )
      .prefault({})
      .describe('Local limiter of this ApiDefinition, for the calls to its upstream when `proxy.rate_limit` names the label; one per gateway (shared by its workers), not distributed.'),
  })
  .describe('Stream rate-limit resource.');

const oasRateFields = {
  enabled: z.boolean().default(true).describe('Whether the limit is in effect.'),
  rate: rateField.describe('Requests allowed per `per`.'),
  per: durationSchema.describe('Window as a duration string such as "10s" or "1m": at least 1ms and at most 8760h when the limit is enabled with a rate above 0.'),
};

/** The API-level limit of an OAS definition (`upstream.rateLimit`), which may be smoothed. */
const oasRateLimitSchema = withRules(z.object({ ...oasRateFields, smoothing: smoothingSchema.optional() }), [thresholdRule, oasPerRule]);

/**
 * An operation's per-endpoint limit: as a classic `extended_paths.rate_limit` rule, it has no
 * smoothing (docs/behaviour.md#smoothing), so a `smoothing` here is refused as an unknown field
 * rather than accepted and never applied.
 */
const oasOperationRateLimitSchema = withRules(z.object(oasRateFields), [oasPerRule]);

const oasOperationSchema = z
  .object({
    rateLimit: oasOperationRateLimitSchema.optional().describe('Per-endpoint limit of this operation, for all clients together.'),
    ignoreAuthentication: z
      .object({ enabled: z.boolean().describe('Serve this operation without authentication.') })
      .optional()
      .describe('Ignore-authentication middleware for this operation.'),
  })
  .describe('Middleware of one operation, keyed by its operationId in the document.');

const gwExtensionSchema = z
  .object({
    info: z
      .object({
        name: z.string().max(bounds.name).optional().describe('Display name; default: info.title of the document.'),
        state: z
          .object({ active: z.boolean().default(true).describe('Whether the gateway serves the API (default true).') })
          .optional()
          .describe('State of the API.'),
      })
      .optional()
      .describe('Identity and state of the API.'),
    server: z
      .object({
        listenPath: z
          .object({
            value: listenPathSchema.describe('Path prefix the gateway serves the API on, e.g. "/petstore/".'),
            strip: z.boolean().default(true).describe('Remove the listen path before proxying (default true).'),
          })
          .describe('Where the gateway serves the API.'),
        authentication: z
          .object({
            enabled: z.boolean().describe('true: callers need an auth token; false: keyless.'),
            header: z
              .object({ name: z.string().min(1).max(bounds.label).describe('Header carrying the key (default Authorization).') })
              .optional()
              .describe('Where the key is read from.'),
          })
          .optional()
          .describe('Client authentication; absent means keyless.'),
      })
      .describe('Listener side of the API.'),
    upstream: z
      .object({
        url: targetUrlSchema.describe('Upstream URL requests are proxied to.'),
        rateLimit: oasRateLimitSchema.optional().describe('API-level rate limit, for all clients together.'),
      })
      .describe('Upstream side of the API.'),
    middleware: z
      .object({
        operations: z
          .record(z.string().max(bounds.name), oasOperationSchema)
          .optional()
          .meta({ maxProperties: bounds.endpoints })
          .describe('Middleware per operationId; path and method come from the document, in the order of `paths`.'),
      })
      .optional()
      .describe('Per-operation middleware.'),
  })
  .describe('gw gateway configuration of an OAS API.');

const oasSchema = z
  .object({
    openapi: z
      .string()
      .max(32)
      .regex(/^3\.[0-9]+\.[0-9]+$/)
      .describe('OpenAPI version of the document (3.x.y).'),
    info: z.record(z.string(), z.unknown()).optional().describe('OpenAPI info object (title, version, …).'),
    paths: z
      .record(z.string(), z.unknown())
      .describe('OpenAPI paths; operationIds name operations, "{placeholder}" segments match like "(.*)".'),
    'x-gw-api-gateway': gwExtensionSchema,
  })
  .loose()
  .describe('An OpenAPI 3 document carrying the gateway configuration in `x-gw-api-gateway`. Exclusive with the classic fields.');

/** Classic fields; none of them may be set together with `oas`. */
const classicFields = [
  'use_keyless',
  'auth',
  'proxy',
  'global_rate_limit',
  'disable_rate_limit',
  'use_extended_paths',
  'extended_paths',
  'state',
  'rate_limit_resources',
] as const;

const specObject = z.object({
  api_id: apiIdSchema.optional(),
  name: z.string().max(bounds.name).optional().describe('Display name of the API; default: metadata.name (OAS: info.title).'),
  categories: stringList(bounds.smallList, bounds.label)
    .optional()
    .describe('Categories the API belongs to (names of Category resources).'),
  use_keyless: z.boolean().optional().describe('true: open to anyone; false (default): callers need an auth token.'),
  auth: z
    .object({
      auth_header_name: z
        .string()
        .min(1)
        .max(bounds.label)
        .default('Authorization')
        .describe('Header carrying the key (default Authorization).'),
    })
    .optional()
    .describe('Where auth-token APIs read the key.'),
  proxy: z
    .object({
      listen_path: listenPathSchema.describe('Path prefix the gateway serves the API on, e.g. "/httpbin/".'),
      target_url: targetUrlSchema.describe('Upstream URL requests are proxied to, e.g. http://127.0.0.1:9000.'),
      strip_listen_path: z.boolean().default(true).describe('Remove the listen path before proxying (default true).'),
      rate_limit: z
        .string()
        .max(bounds.label)
        .optional()
        .describe('Label of a rate_limit_resources entry that limits calls to the upstream.'),
    })
    .optional()
    .describe('Listen path and upstream of a classic API; required unless `oas` is set.'),
  global_rate_limit: globalRateLimitSchema.optional(),
  disable_rate_limit: z
    .boolean()
    .optional()
    .describe('true disables the API-level limiter: `global_rate_limit` and the `extended_paths.rate_limit` rules (key-level limits still apply).'),
  use_extended_paths: z
    .boolean()
    .optional()
    .describe('Enables extended_paths; default: true when extended_paths is set.'),
  extended_paths: z
    .object({
      rate_limit: z.array(endpointRateLimitSchema).max(bounds.endpoints).optional().describe('Per-endpoint limits in evaluation order (first match wins).'),
      ignored: z.array(ignoredEndpointSchema).max(bounds.endpoints).optional().describe('Endpoints served without authentication.'),
    })
    .optional()
    .describe('Endpoint-level middleware of a classic API.'),
  state: z
    .object({ active: z.boolean().default(true).describe('Whether the gateway serves the API (default true).') })
    .optional()
    .describe('State of the API.'),
  rate_limit_resources: listMap(rateLimitResourceSchema, 'label', bounds.smallList)
    .optional()
    .describe('Stream rate-limit resources; labels are unique.'),
  oas: oasSchema.optional(),
});

type SpecShape = z.output<typeof specObject>;

export const apiDefinitionSpecSchema = withRules(specObject, [
  {
    rule: 'has(self.oas) || has(self.proxy)',
    message: 'set either proxy (a classic definition) or oas',
    holds: (v: SpecShape) => v.oas !== undefined || v.proxy !== undefined,
  },
  {
    rule: `!has(self.oas) || !(${classicFields.map((f) => `has(self.${f})`).join(' || ')})`,
    message: `oas cannot be combined with the classic fields (${classicFields.join(', ')})`,
    holds: (v: SpecShape) => v.oas === undefined || classicFields.every((f) => v[f] === undefined),
  },
]).describe('An API the gateway serves: classic fields (proxy, global_rate_limit, extended_paths, …) or an OAS document in `oas`, not both.');

export const apiDefinitionStatusSchema = z
  .object({
    ...statusBaseFields,
    api_id: z.string().max(128).optional().describe('The effective api_id (spec.api_id or its default).'),
    // Each is compiled into the API's ConfigMap (900 KiB, at least ~300 bytes a Policy), which bounds them first.
    policies: z.array(policyRefField).max(4096).optional().describe('Policies granting this API (namespace/name).'),
    configMap: z.string().max(bounds.name).optional().describe('ConfigMap holding the compiled gateway config of this API.'),
    listen_path: z.string().max(bounds.path).optional().describe('The listen path the gateways serve this API on (proxy.listen_path, or x-gw-api-gateway.server.listenPath of the OAS document), as last compiled.'),
    rate_limit: z
      .string()
      .max(64)
      .optional()
      .describe('The API-level rate limit the gateways enforce, as last compiled: <rate>/<per>s, or none when it is disabled or not set.'),
  })
  .describe('What the operator observed and compiled.');

export const apiDefinitionSchema = resourceSchema('ApiDefinition', apiDefinitionSpecSchema, apiDefinitionStatusSchema, prefixedNameMaxLength);

export type ApiDefinitionSpec = z.infer<typeof apiDefinitionSpecSchema>;
export type ApiDefinitionStatus = z.infer<typeof apiDefinitionStatusSchema>;
export type ApiDefinition = z.infer<typeof apiDefinitionSchema>;
export type OasDocument = z.infer<typeof oasSchema>;
export type OasOperation = z.infer<typeof oasOperationSchema>;

/**
 * The listen path and the limit come from the status: what the gateways serve, for an OAS API
 * too (its listen path is in the document) and with a disabled limit shown as none.
 */
export const apiDefinitionPrinterColumns = [
  { name: 'API ID', type: 'string', jsonPath: '.status.api_id' },
  { name: 'LISTEN PATH', type: 'string', jsonPath: '.status.listen_path' },
  { name: 'RATE LIMIT', type: 'string', jsonPath: '.status.rate_limit' },
  ...readyColumns,
  { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' },
] as const;
