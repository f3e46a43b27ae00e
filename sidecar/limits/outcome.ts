import type { Algorithm } from './algorithm.ts';
import { isApiScope, type PlannedLimit } from './plan-types.ts';
import type { DecisionOutcome, LimitDecision, RateHeaderData } from './types.ts';

export interface StepResult {
  allowed: boolean;
  limit: number;
  remaining: number;
  resetMs: number;
}

export interface Step {
  limit: PlannedLimit;
  algorithm: Algorithm;
  /** This gateway's share under the DRL; the full rate otherwise. */
  share: number;
}

export interface Evaluated {
  decision: LimitDecision;
  /** Algorithm of the limit that applied, for the decisions metric. */
  algorithm: Algorithm | 'none';
}

const header = (result: StepResult): RateHeaderData => ({
  limit: result.limit,
  remaining: result.remaining,
  reset: Math.ceil(result.resetMs / 1000),
});

/**
 * The decision from per-limit results: the refusing limit applies when there is one,
 * else the tightest one met (least remaining); the quota is judged only when every rate
 * limit passed.
 */
export function toDecision(
  steps: readonly Step[],
  results: readonly (StepResult | undefined)[],
  quota: StepResult | null,
): Evaluated {
  const refusedAt = results.findIndex((r) => r !== undefined && !r.allowed);
  let applied = refusedAt;
  if (applied < 0) {
    for (let i = 0; i < results.length; i++) {
      if (results[i] && (applied < 0 || results[i]!.remaining < results[applied]!.remaining)) applied = i;
    }
  }
  let outcome: DecisionOutcome = 'allowed';
  if (refusedAt >= 0) outcome = isApiScope(steps[refusedAt]!.limit.scope) ? 'api_rate_limited' : 'key_rate_limited';
  else if (quota && !quota.allowed) outcome = 'quota_exceeded';
  let rate = applied >= 0 ? header(results[applied]!) : null;
  // The quota refused a request every rate limit admitted: each gives back what it counted
  // (docs/behaviour.md#evaluation-order), so the headers show the allowance as it is left.
  if (outcome === 'quota_exceeded' && rate !== null) rate = { ...rate, remaining: Math.min(rate.limit, rate.remaining + 1) };
  return {
    decision: { outcome, rate, quota: quota ? header(quota) : null },
    algorithm: applied >= 0 ? steps[applied]!.algorithm : 'none',
  };
}

export const isRateLimited = (decision: LimitDecision): boolean =>
  decision.outcome === 'api_rate_limited' || decision.outcome === 'key_rate_limited';
