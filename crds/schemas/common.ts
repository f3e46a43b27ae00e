import { z } from 'zod';

/**
 * Field schemas shared by several kinds, and the one place a cross-field rule is
 * declared: `withRules` enforces it in zod (folder mode, admin writes, compile) and emits
 * the same rule as a CEL `x-kubernetes-validations` entry for the API server.
 */

export interface CrossFieldRule<T> {
  /** CEL expression evaluated by the API server with `self` bound to the object. */
  rule: string;
  message: string;
  /** Field the error points at, relative to the object (`.per`); also the zod issue path. */
  field?: string;
  /** The same rule for zod (kept beside the CEL text so the two cannot drift apart unseen). */
  holds: (value: T) => boolean;
}

export function withRules<S extends z.ZodType>(schema: S, rules: readonly CrossFieldRule<z.output<S>>[]): S {
  return schema
    .superRefine((value, ctx) => {
      for (const r of rules) {
        if (!r.holds(value)) ctx.addIssue({ code: 'custom', message: r.message, path: r.field ? r.field.slice(1).split('.') : [] });
      }
    })
    .meta({
      'x-kubernetes-validations': rules.map((r) => ({
        rule: r.rule,
        message: r.message,
        ...(r.field ? { fieldPath: r.field } : {}),
      })),
    });
}

/**
 * A list whose items are unique by one field (Kubernetes `x-kubernetes-list-type: map`):
 * the API server refuses duplicates, and so does zod.
 */
export function listMap<I extends z.ZodType<Record<K, unknown>>, K extends string>(item: I, key: K, maxItems: number) {
  return z
    .array(item)
    .max(maxItems)
    .superRefine((items, ctx) => {
      const seen = new Set<unknown>();
      items.forEach((entry, i) => {
        if (seen.has(entry[key])) ctx.addIssue({ code: 'custom', message: `duplicate ${key} ${JSON.stringify(entry[key])}`, path: [i, key] });
        seen.add(entry[key]);
      });
    })
    .meta({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': [key] });
}

/** Bounds keep objects small and let the API server's CEL cost estimator accept the rules. */
export const bounds = {
  name: 253,
  label: 63,
  path: 1024,
  url: 2048,
  text: 4096,
  smallList: 64,
  endpoints: 128,
  accessRights: 64,
} as const;

const maxInt32 = 2_147_483_647;

/**
 * A whole number within bounds. The bounds are checked before `.int()`, whose own check of a
 * huge number (`1e300`) reports the safe-integer bound: the first issue is the one an
 * operation's error names, and it must name the field's real bound.
 */
const boundedInt = (min: number, max: number) => z.number().min(min).max(max).int();

/** Requests per window: an integer, 0 meaning "no limit at this scope". */
export const rateField = boundedInt(0, maxInt32);
/** A year in seconds: the longest window, and the longest smoothing hold-off. */
const maxSeconds = 31_536_000;
/** Window length in whole seconds (classic definitions, policies, keys). */
export const perSecondsField = boundedInt(0, maxSeconds);
export const countField = boundedInt(0, maxInt32);
/** A count that must be at least 1, stated as its one bound (not a count's 0 beside it). */
export const positiveCountField = boundedInt(1, maxInt32);
/** Quota fields allow -1 (unlimited), like the key record of docs/behaviour.md#admin-operations. */
export const quotaField = z.number().int().min(-1).max(Number.MAX_SAFE_INTEGER);
export const unixTimeField = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
export const stringList = (maxItems: number = bounds.smallList, maxLength: number = bounds.name) =>
  z.array(z.string().min(1).max(maxLength)).max(maxItems);

/**
 * An api_id, or the name a Key's `apply_policies` gives a Policy: no path separator, no
 * leading dot, no space or control character, so a reference is one plain word wherever it
 * is shown or joined (`namespace/name`). Kubernetes object names fit in it.
 */
export const idPattern = '^[A-Za-z0-9][A-Za-z0-9._-]*$';

/** Text shown to people (`kubectl get` columns, logs): no control character, which a terminal would act on. */
export const displayText = (maxLength: number) => z.string().max(maxLength).regex(/^\P{Cc}*$/u, 'must not contain control characters');

/**
 * `access_rights` of a Key or a Policy: the APIs granted, keyed by api_id. An entry's own
 * api_id, when set, must be its key.
 */
export function accessRightsMap<R extends z.ZodType<{ api_id?: string | undefined }>>(right: R) {
  return withRules(z.record(z.string().max(128), right), [
    {
      rule: `self.all(k, k.matches('${idPattern}'))`,
      message: 'each access_rights entry must be keyed by an api_id (letters, digits, ".", "_" and "-", not starting with "." or "-")',
      holds: (v) => Object.keys(v).every((k) => new RegExp(idPattern).test(k)),
    },
    {
      rule: 'self.all(k, !has(self[k].api_id) || self[k].api_id == k)',
      message: 'each access_rights entry must be keyed by its own api_id',
      holds: (v) => Object.entries(v).every(([k, r]) => r.api_id === undefined || r.api_id === k),
    },
  ]).meta({ maxProperties: bounds.accessRights });
}

/** HTTP methods of endpoint rules; `*` matches any method. */
export const httpMethodSchema = z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS', 'TRACE', 'CONNECT', '*']);

/** `meta_data.rate_limit_pattern` of a Policy or a Key (docs/behaviour.md#custom-rate-limit-keys). */
export const rateLimitPatternField = z
  .string()
  .max(bounds.path)
  .describe(
    'Custom rate-limit key: "$gw_meta.FIELD" references to session metadata (whole parts, or within text as in "org-$gw_meta.org"), joined by "|". Quota, rate limit and throttle then count per evaluated value; a missing field or an empty value falls back to the key.',
  );

/**
 * A Key's metadata bounds. The API server spends seconds per ten thousand free-form fields of
 * one object (a Key of 60,000 took 20 s to create), past create-key's deadline: so many are
 * refused as a client's mistake rather than failed as the server's.
 */
export const META_DATA_MAX_FIELDS = 256;
export const META_DATA_MAX_BYTES = 64 * 1024;

/**
 * A Key's free-form metadata: kept as written (x-kubernetes-preserve-unknown-fields), but for
 * rate_limit_pattern, which the gateway reads and would otherwise ignore silently when it is
 * not a string, and bounded in fields (the CRD too) and in size (checked where it is written:
 * create-key, the folder).
 */
export const metaDataSchema = z
  .object({ rate_limit_pattern: rateLimitPatternField.optional() })
  .loose()
  .meta({ maxProperties: META_DATA_MAX_FIELDS })
  .superRefine((value, ctx) => {
    const names = Object.keys(value);
    if (names.length > META_DATA_MAX_FIELDS) ctx.addIssue({ code: 'too_big', origin: 'object', maximum: META_DATA_MAX_FIELDS, inclusive: true, input: value, message: `at most ${META_DATA_MAX_FIELDS} fields` });
    for (const name of names) {
      if (name.length > bounds.name) ctx.addIssue({ code: 'too_big', origin: 'string', maximum: bounds.name, inclusive: true, input: name, path: [name] });
    }
    if (Buffer.byteLength(JSON.stringify(value)) > META_DATA_MAX_BYTES) ctx.addIssue({ code: 'custom', input: value, message: `at most ${META_DATA_MAX_BYTES} bytes as JSON` });
  });

interface SmoothingShape {
  enabled: boolean;
  threshold?: number | undefined;
  step?: number | undefined;
  trigger?: number | undefined;
  delay?: number | undefined;
}

/**
 * A number smoothing needs only while it is on: `enabled: false` turns smoothing off (SPEC
 * §2.2) whatever the numbers are, or without them, so the create-key answer's own switched-off
 * `smoothing` (zeros) can be sent back as it is. Off, a number may still not be negative. The
 * rule holds the field's whole bound, on and off, so that a bad value meets one message naming
 * the bound that applies, not a field minimum of 0 beside it.
 */
const whenEnabled = (field: 'threshold' | 'step' | 'trigger', cel: string, bound: string, holds: (value: number) => boolean): CrossFieldRule<SmoothingShape> => ({
  // CEL compares a double (trigger) with a double literal.
  rule: `has(self.enabled) && self.enabled ? has(self.${field}) && ${cel} : !has(self.${field}) || self.${field} >= ${field === 'trigger' ? '0.0' : '0'}`,
  message: `${field} must be set, ${bound}, when smoothing is enabled, and at least 0 when it is off`,
  field: `.${field}`,
  holds: (v) => {
    const value = v[field];
    return v.enabled ? value !== undefined && holds(value) : value === undefined || value >= 0;
  },
});

export const smoothingSchema = withRules(
  z
    .object({
      enabled: z.boolean().default(false).describe('Turns smoothing on. Smoothing only acts with the sliding-log limiter (enable_redis_rolling_limiter).'),
      threshold: z
        .number()
        .int()
        .describe('Initial current allowance and its lower bound, in requests per window; at least 1 and at most `rate` when enabled, at least 0 when off.')
        .optional(),
      step: z.number().int().describe('How much the current allowance moves per RateLimitSmoothingUp/Down event; at least 1 when enabled, at least 0 when off.').optional(),
      trigger: z
        .number()
        .describe('Fraction of `step` at which an event fires (typically 0.1 to 1.0); greater than 0 when enabled, at least 0 when off.')
        .optional(),
      delay: boundedInt(0, maxSeconds)
        .describe('Hold-off in seconds after an event before another may be emitted, at most a year; required when enabled.')
        .optional(),
    })
    .describe('Rate limit smoothing: a current allowance that moves between `threshold` and `rate`. With `enabled: false` the numbers may be left out.'),
  [
    whenEnabled('threshold', 'self.threshold >= 1', 'at least 1', (n) => n >= 1),
    whenEnabled('step', 'self.step >= 1', 'at least 1', (n) => n >= 1),
    whenEnabled('trigger', 'self.trigger > 0.0', 'greater than 0', (n) => n > 0),
    {
      rule: '!has(self.enabled) || !self.enabled || has(self.delay)',
      message: 'delay must be set when smoothing is enabled',
      field: '.delay',
      holds: (v) => !v.enabled || v.delay !== undefined,
    },
  ],
);
export type Smoothing = z.infer<typeof smoothingSchema>;

interface RateShape {
  rate?: number | undefined;
  per?: number | undefined;
  smoothing?: { enabled: boolean; threshold?: number | undefined } | null | undefined;
}

/** Rules for an object whose `rate` and `per` are optional and belong together. */
export const ratePairRules: readonly CrossFieldRule<RateShape>[] = [
  {
    rule: 'has(self.rate) == has(self.per)',
    message: 'rate and per must be set together (or both left out)',
    holds: (v) => (v.rate === undefined) === (v.per === undefined),
  },
];

export const perPositiveRule: CrossFieldRule<RateShape> = {
  rule: '!has(self.rate) || self.rate == 0 || (has(self.per) && self.per > 0)',
  message: 'per must be greater than 0 when rate is greater than 0',
  field: '.per',
  holds: (v) => !v.rate || (v.per ?? 0) > 0,
};

export const thresholdRule: CrossFieldRule<Omit<RateShape, 'per'>> = {
  rule: '!has(self.smoothing) || !has(self.smoothing.enabled) || !self.smoothing.enabled || !has(self.smoothing.threshold) || !has(self.rate) || self.rate == 0 || self.smoothing.threshold <= self.rate',
  message: 'smoothing.threshold must not exceed rate',
  field: '.smoothing.threshold',
  holds: (v) => !v.smoothing?.enabled || v.smoothing.threshold === undefined || !v.rate || v.smoothing.threshold <= v.rate,
};

/** The limit fields a policy, a key and a per-API access right share (docs/behaviour.md#limits-and-their-scopes, docs/behaviour.md#admin-operations); all optional. */
export const keyLimitFields = {
  rate: rateField.describe('Requests allowed per `per` seconds; 0 means no rate limit at this scope.').optional(),
  per: perSecondsField.describe('Window length in seconds; must be greater than 0 when rate is greater than 0.').optional(),
  quota_max: quotaField.describe('Requests allowed per quota period; -1 or 0 means unlimited.').optional(),
  quota_renewal_rate: z
    .number()
    .int()
    .min(0)
    .max(Number.MAX_SAFE_INTEGER)
    .describe('Length of the quota period in seconds; 0 means the quota never renews.')
    .optional(),
  throttle_interval: boundedInt(0, 3_600)
    .describe('Seconds to wait before retrying a rate-limited request inside the gateway; 0 disables throttling.')
    .optional(),
  throttle_retry_limit: boundedInt(0, 1_000)
    .describe('How many times a rate-limited request is retried before it is refused.')
    .optional(),
  smoothing: smoothingSchema.optional(),
};

/** A metadata.generation value. */
const generationField = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

export const conditionSchema = z
  .object({
    type: z
      .string()
      .min(1)
      .max(316)
      .regex(/^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/)
      .describe('Condition type; gw sets `Ready`.'),
    status: z.enum(['True', 'False', 'Unknown']).describe('True, False or Unknown.'),
    observedGeneration: generationField.optional().describe('metadata.generation the condition was set for.'),
    lastTransitionTime: z.string().max(64).meta({ format: 'date-time' }).describe('When the status last changed (RFC 3339).'),
    reason: z
      .string()
      .min(1)
      .max(1024)
      .regex(/^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/)
      .describe('CamelCase reason for the status, e.g. Compiled, InvalidRegex, MissingApi.'),
    message: z.string().max(32_768).describe('Human-readable explanation of the status.'),
  })
  .describe('A Kubernetes condition (metav1.Condition).');
export type Condition = z.infer<typeof conditionSchema>;

/** Fields every kind's status starts with. */
export const statusBaseFields = {
  observedGeneration: generationField.optional().describe('metadata.generation the operator last reconciled.'),
  conditions: z
    .array(conditionSchema)
    .max(16)
    .optional()
    .meta({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['type'] })
    .describe('Latest observations; `Ready` says whether the resource is in effect and, if not, why.'),
};

/** The part of ObjectMeta gw reads; everything else the API server returns is kept as is. */
export const objectMetaSchema = z
  .object({
    name: z.string().min(1).max(bounds.name),
    namespace: z.string().min(1).max(bounds.label).optional(),
    uid: z.string().optional(),
    generation: z.number().int().optional(),
    resourceVersion: z.string().optional(),
    labels: z.record(z.string(), z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
  })
  .loose();
export type ObjectMeta = z.infer<typeof objectMetaSchema>;

/**
 * The longest name of an ApiDefinition or a Key: the operator names an object after it with a
 * 7-character prefix (`gw-api-<name>`, its ConfigMap; `gw-key-<name>`, its Secret), which the
 * API server refuses past 253 characters. Refused at apply rather than left without status.
 */
export const prefixedNameMaxLength = bounds.name - 'gw-api-'.length;

/** A Policy as resources name it, `namespace/name`. */
export const policyRefField = z.string().min(1).max(bounds.label + 1 + bounds.name);

/**
 * The Ready condition's status in every kind's table, and its reason (why a resource is not
 * ready, or how it is) in `kubectl get -o wide`.
 */
export const readyColumns = [
  { name: 'READY', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
  { name: 'REASON', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].reason', priority: 1 },
] as const;
