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
  /**
   * Admitted with the limits the store counts left unchecked, the store having failed under
   * `redis_failure_mode: open`: counted as `allowed_without_store`, not as a request no limit
   * applied to.
   */
  withoutStore?: true;
}

const header = (result: StepResult): RateHeaderData => ({
  limit: result.limit,
  remaining: result.remaining,
  reset: Math.ceil(result.resetMs / 1000),
});

/**
 * A rate limit's result once the request it admitted is given back: one more remaining, and a
 * DRL bucket full again one token's refill sooner (the Redis algorithms' resets follow their
 * oldest entry or their window, which the newest entry does not move).
 */
function givenBack(step: Step, result: StepResult): StepResult {
  const remaining = Math.min(result.limit, result.remaining + 1);
  if (step.algorithm !== 'drl') return { ...result, remaining };
  return { ...result, remaining, resetMs: result.resetMs - Math.floor(step.limit.perMs / step.share) };
}

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
  // The quota refused a request every rate limit admitted: each gives back what it counted
  // (docs/behaviour.md#evaluation-order), so the headers show the allowance as it is left.
  const rate = applied < 0 ? null : header(outcome === 'quota_exceeded' ? givenBack(steps[applied]!, results[applied]!) : results[applied]!);
  return {
    decision: { outcome, rate, quota: quota ? header(quota) : null },
    algorithm: applied >= 0 ? steps[applied]!.algorithm : 'none',
  };
}

/**
 * The refusal a rate limit's reading (a peek, which counts nothing) says a request would meet
 * now: a throttled request that gives up answers with the limits as they are when it does,
 * not as its first evaluation found them.
 */
export function refusalFrom(step: Step, held: StepResult, quota: RateHeaderData | null): Evaluated {
  return {
    decision: { outcome: isApiScope(step.limit.scope) ? 'api_rate_limited' : 'key_rate_limited', rate: header(held), quota },
    algorithm: step.algorithm,
  };
}

export const isRateLimited = (decision: LimitDecision): boolean =>
  decision.outcome === 'api_rate_limited' || decision.outcome === 'key_rate_limited';
