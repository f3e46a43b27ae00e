import type { CompiledSmoothing, ResourceRef } from '../../crds/compiled.ts';
import type { limitLevels } from '../../crds/admin-answers.ts';

/** What the engine checks for one request, derived from config, session and identity. */

/** The five levels of docs/behaviour.md#evaluation-order. */
export type LimitScope = (typeof limitLevels)[number];

export const isApiScope = (scope: LimitScope): boolean => scope === 'api_endpoint' || scope === 'api';

/** What configured a limit: the resource, and the endpoint rule (`GET /items/{id}`) of an endpoint limit. */
export interface LimitSource {
  resource: ResourceRef;
  rule: string | null;
}

export interface SmoothingPlan {
  settings: CompiledSmoothing;
  /** The resource whose smoothing settings these are (for the Event). */
  source: ResourceRef;
}

export interface PlannedLimit {
  scope: LimitScope;
  source: LimitSource;
  rate: number;
  perMs: number;
  /** Limiter identity and Redis hash tag; built from api ids and hashed identities only. */
  limiterId: string;
  /** APIs whose live gateways share this limit under the Distributed Rate Limiter. */
  coverApis: readonly string[];
  smoothing: SmoothingPlan | null;
}

export interface QuotaPlan {
  quotaId: string;
  source: ResourceRef;
  max: number;
  /** 0: the quota never renews. */
  renewalMs: number;
  /** State used when the store holds none yet (from the session's quota_remaining / quota_renews). */
  initRemaining: number;
  /** 0: no current renewal time, so the store starts a period at its own now. */
  initRenewsMs: number;
}

export interface ThrottlePlan {
  intervalMs: number;
  retries: number;
}

export interface RequestPlan {
  /** In evaluation order: the API level first, then the key level (docs/behaviour.md#evaluation-order). */
  limits: PlannedLimit[];
  quota: QuotaPlan | null;
  throttle: ThrottlePlan | null;
}
