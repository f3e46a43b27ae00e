import { z } from 'zod';

/** The longest wait a Node timer keeps (2^31 − 1 ms, about 24.8 days); a longer one fires at once, and a wait re-armed on it spins. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * Gateway-wide settings (docs/architecture.md#settings). Names are the rate-limiting vocabulary's own. The operator puts the
 * cluster's settings into every compiled config; a sidecar's settings file and `GW_*`
 * environment variables are layered on top (see common/settings-loader.ts).
 */
export const gatewaySettingsSchema = z
  .object({
    enable_redis_rolling_limiter: z
      .boolean()
      .default(false)
      .describe('Use the sliding-log limiter (cluster-wide, shared counter, spike arrest) instead of the Distributed Rate Limiter.'),
    enable_sentinel_rate_limiter: z
      .boolean()
      .default(false)
      .describe('Use the sentinel variant of the sliding-log limiter: block at once for `per` once the limit is reached; log writes in the background.'),
    enable_non_transactional_rate_limiter: z
      .boolean()
      .default(false)
      .describe('With the sentinel limiter, write the log through a pipeline instead of a MULTI/EXEC transaction.'),
    enable_fixed_window_rate_limiter: z
      .boolean()
      .default(false)
      .describe('Use one counter per window aligned to `per`; constant store use, no spike arrest.'),
    drl_threshold: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe('When > 0, use the Distributed Rate Limiter only if rate/per exceeds drl_threshold x live gateways, else the sliding log.'),
    rate_limit_response_headers: z
      .enum(['rate_limits', 'quotas'])
      .default('quotas')
      .describe('What X-RateLimit-* headers carry: rate limit data, or quota data.'),
    redis_failure_mode: z
      .enum(['open', 'closed'])
      .default('open')
      .describe('When Redis cannot be reached: `open` lets requests through, `closed` refuses with 503 those whose admission needs Redis (a session, a limit or quota counted there; a DRL limit is counted in the gateway).'),
    redis_timeout_ms: z.number().int().min(1).max(60_000).default(250).describe('Per-command Redis timeout: a request waits for at most two in a row (its session read again, then its limits).'),
    forwarder: z
      .enum(['undici', 'http-proxy'])
      .default('undici')
      .describe('Forwarder for ordinary requests; connection upgrades always use http-proxy.'),
    max_request_body_bytes: z
      .number()
      .int()
      .min(0)
      .default(10 * 1024 * 1024)
      .describe('Largest request body proxied upstream; larger bodies get 413.'),
    upstream_timeout_ms: z.number().int().min(1).max(MAX_TIMER_MS).default(30_000).describe('Time allowed for the upstream to answer.'),
    throttle_max_wait_ms: z
      .number()
      .int()
      .min(0)
      .max(MAX_TIMER_MS)
      .default(30_000)
      .describe('Upper bound on the total time a throttled request may wait for retries.'),
    stream_rate_limit_max_wait_ms: z
      .number()
      .int()
      .min(0)
      .max(MAX_TIMER_MS)
      .nullable()
      .default(null)
      .describe(
        'Longest a request waits in line for a slot of a stream rate-limit resource; one that would wait longer gets 429 at once. null: upstream_timeout_ms.',
      ),
  })
  .strict();

export type GatewaySettings = z.infer<typeof gatewaySettingsSchema>;

export const defaultGatewaySettings: GatewaySettings = gatewaySettingsSchema.parse({});
