import type { CompiledApi, CompiledConfig, ResourceRef } from '../../crds/compiled.ts';
import type { Session } from '../../crds/session.ts';

/**
 * The seam between the rate-limit engine (sidecar/limits) and the HTTP gateway
 * (sidecar/). The engine knows nothing of HTTP: the gateway resolves the API, the
 * endpoint path and the session, asks for one decision, and renders it.
 */

export interface LimitRequest {
  api: CompiledApi;
  /** Upper-case HTTP method. */
  method: string;
  /** Request path relative to the API's listen path, starting with `/`, no query. */
  path: string;
  /** The caller's session; null on keyless APIs and ignored endpoints. */
  session: Session | null;
  /** Hex SHA-256 of the raw key; the credential identity. Null when session is null. */
  keyHash: string | null;
}

export interface RateHeaderData {
  limit: number;
  remaining: number;
  /**
   * Unix time in seconds when the allowance is next restored. A sliding log or sentinel in
   * Redis reports 0 while `rate_limit_response_headers` is `quotas`: no header shows it then,
   * and finding it costs a lookup of the log's oldest entry on every request.
   */
  reset: number;
}

export type DecisionOutcome =
  | 'allowed'
  | 'api_rate_limited'
  | 'key_rate_limited'
  | 'quota_exceeded'
  /** Redis unreachable and the failure mode is `closed`. */
  | 'store_unavailable';

export interface LimitDecision {
  outcome: DecisionOutcome;
  /** The rate limit that applied (the tightest one met), for `rate_limits` headers. */
  rate: RateHeaderData | null;
  /** The quota that applied, for `quotas` headers. */
  quota: RateHeaderData | null;
}

export interface SmoothingEvent {
  reason: 'RateLimitSmoothingUp' | 'RateLimitSmoothingDown';
  /** The resource whose smoothing settings fired (Policy, Key or ApiDefinition). */
  source: ResourceRef;
  /** Identity of the limiter (hashed; never a raw key). */
  limiterKey: string;
  oldAllowance: number;
  newAllowance: number;
  time: Date;
}

export interface SmoothingEventSink {
  emit(event: SmoothingEvent): void;
}

export interface LimitEngine {
  decide(request: LimitRequest, signal?: AbortSignal): Promise<LimitDecision>;
  /** Swap in a new compiled config (settings, APIs, policies); counters are kept. */
  updateConfig(config: CompiledConfig): void;
  close(): Promise<void>;
}
