import { z } from 'zod';

/**
 * The answers of the admin reads `kubectl gw` makes (docs/behaviour.md#admin-operations):
 * built by the admin listener, parsed by the plugin. One schema for both sides, so a field
 * the gateway renames breaks the plugin's tests, not a user's terminal.
 */

export const limitLevels = ['api_endpoint', 'api', 'key_endpoint', 'key_per_api', 'key_global'] as const;
const level = z.enum(limitLevels);

const resource = z.object({ kind: z.string(), namespace: z.string(), name: z.string() });

/** A configured limit the request does not meet: replaced by a more specific one, or outranked by another policy's. */
const alternative = z.object({ level, source: resource, rule: z.string().nullable(), rate: z.number(), per: z.number() });

const smoothing = z.object({ enabled: z.boolean(), threshold: z.number(), step: z.number(), trigger: z.number(), delay: z.number() });

const reading = z.object({
  level,
  source: resource,
  /** The endpoint rule (`GET /items/{id}`) of an endpoint limit. */
  rule: z.string().nullable(),
  rate: z.number(),
  per: z.number(),
  algorithm: z.enum(['drl', 'sliding_log', 'sentinel', 'fixed_window']),
  drl: z.object({ gateways: z.number(), share: z.number() }).nullable(),
  smoothing: smoothing.nullable(),
  /** Smoothing the limit has that its algorithm does not apply: only the sliding log smooths. */
  unused_smoothing: smoothing.nullable(),
  /** Null: counted in other gateways' memory (the DRL, read on a gateway that proxies nothing). */
  count: z.number().nullable(),
  limit: z.number().nullable(),
  remaining: z.number().nullable(),
  /** Unix seconds, as X-RateLimit-Reset. */
  reset: z.number().nullable(),
});

/** `GET /gw/keys/{key_hash}/limits` (docs/behaviour.md#why-was-a-request-limited). */
export const keyLimitsAnswerSchema = z.object({
  key_hash: z.string(),
  key_id: z.string(),
  api_id: z.string(),
  method: z.string(),
  path: z.string(),
  authentication: z.enum(['key', 'keyless', 'ignored']),
  access: z.enum(['granted', 'inactive', 'expired', 'not_granted']),
  outcome: z.enum(['allowed', 'api_inactive', 'api_rate_limited', 'key_rate_limited', 'quota_exceeded', 'access_denied']),
  refused_by: z.enum([...limitLevels, 'quota']).nullable(),
  /** The gateway's answer to a request now, when it refuses: status and X-GW-Error-Code. */
  answer: z.object({ status: z.number(), code: z.string() }).nullable(),
  limits: z.array(reading),
  quota: z
    .object({ source: resource, max: z.number(), renewal: z.number(), used: z.number(), remaining: z.number(), reset: z.number() })
    .nullable(),
  /** A throttled key's: a request its rate limits refuse waits, looking again every interval s, up to retries times and max_wait s in all. */
  throttle: z.object({ interval: z.number(), retries: z.number(), max_wait: z.number() }).nullable(),
  passed_over: z.array(alternative),
  chosen_over: z.array(alternative),
  /**
   * Smoothing on a scope the request meets that has no rate (rate 0: no limit there), so it
   * smooths nothing; a limit's own smoothing its algorithm does not apply is its `unused_smoothing`.
   */
  unused_smoothing: z.array(z.object({ level, source: resource, rule: z.string().nullable(), smoothing, reason: z.string() })).default([]),
});

export type KeyLimitsAnswer = z.infer<typeof keyLimitsAnswerSchema>;
export type LimitReadingAnswer = KeyLimitsAnswer['limits'][number];

/**
 * `GET /gw/gateways`: the gateways whose heartbeat is live in each loaded API's set. Gateways
 * beat only while the Distributed Rate Limiter may be used (`heartbeats`), since only it needs
 * to know how many share a limit.
 */
export const liveGatewaysAnswerSchema = z.object({
  heartbeats: z.boolean(),
  apis: z.array(z.object({ api_id: z.string(), gateways: z.array(z.string()) })),
});

export type LiveGatewaysAnswer = z.infer<typeof liveGatewaysAnswerSchema>;
