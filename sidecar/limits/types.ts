import type { MaybePromise } from '../../common/maybe-promise.ts';
import type { CompiledApi, CompiledConfig, CompiledSmoothing, ResourceRef } from '../../crds/compiled.ts';
import type { Algorithm } from './algorithm.ts';
import type { SmoothingWithoutRate } from './effective-session.ts';
import type { Alternative } from './plan.ts';
import type { LimitScope, LimitSource, ThrottlePlan } from './plan-types.ts';
import type { PeekResult } from './stores/store.ts';
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

/** One limit a request meets, and what its limiter holds now (docs/behaviour.md#why-was-a-request-limited). */
export interface LimitReading {
  scope: LimitScope;
  source: LimitSource;
  /** As configured; `per` in seconds. */
  rate: number;
  per: number;
  algorithm: Algorithm;
  /**
   * Under the DRL: the live gateways sharing the limit and this gateway's share, counted in its
   * own memory. Null figures on a gateway that takes no proxied traffic: it holds no count.
   */
  drl: { gateways: number; share: number } | null;
  smoothing: CompiledSmoothing | null;
  /** Smoothing the limit has that its algorithm does not apply: only the sliding log smooths (docs/behaviour.md#smoothing). */
  unusedSmoothing: CompiledSmoothing | null;
  /** Requests in the window, the limit in force (smoothed allowance, DRL share), what is left and when it is next restored (Unix ms); null: not held here. */
  held: PeekResult | null;
}

export interface QuotaReading {
  source: ResourceRef;
  max: number;
  /** Seconds; 0: never renews. */
  renewal: number;
  used: number;
  remaining: number;
  /** Unix ms of the next renewal; 0: never. */
  resetMs: number;
}

/**
 * The limits a request would meet now, in evaluation order, with what each holds; read
 * with the decision's own planning and store, and nothing counted.
 */
export interface LimitExplanation {
  limits: LimitReading[];
  quota: QuotaReading | null;
  /** With the gateway's throttle_max_wait_ms, which bounds the whole wait whatever the retries. */
  throttle: (ThrottlePlan & { maxWaitMs: number }) | null;
  passedOver: Alternative[];
  outranked: Alternative[];
  smoothingWithoutRate: SmoothingWithoutRate[];
  /** What a request now would get (before any throttle retry), and the level that would refuse it. */
  outcome: Exclude<DecisionOutcome, 'store_unavailable'>;
  refusedBy: LimitScope | 'quota' | null;
}

export interface LimitEngine {
  /**
   * The request's decision: the decision itself when nothing is counted (no store call, no
   * wait), so a request with no limit to meet takes no promise on the request path
   * (docs/architecture.md#performance). Throws where it would otherwise reject.
   */
  decide(request: LimitRequest, signal?: AbortSignal): MaybePromise<LimitDecision>;
  /** Whether a rate-limited decision for the request would be throttled (waited on and retried): the key-level limit it meets carries a throttle. */
  throttles(request: LimitRequest): boolean;
  /** Reads what `decide` would meet for the request; takes nothing. Throws when the store cannot be read. */
  explain(request: LimitRequest): Promise<LimitExplanation>;
  /** Swap in a new compiled config (settings, APIs, policies); counters are kept. */
  updateConfig(config: CompiledConfig): void;
  /** Whether the store's calls are failing now: Redis away, or up but not answering in time. */
  readonly storeFailing: boolean;
  close(): Promise<void>;
}
