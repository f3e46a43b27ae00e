import type { CompiledEndpointLimit, CompiledKeyLimit, CompiledRate, CompiledSmoothing } from '../compiled.ts';
import type { Smoothing } from '../schemas/common.ts';
import type { PolicyAccessRight } from '../schemas/policy.ts';
import { regexPathPattern } from './paths.ts';
import type { CompileProblem } from './problems.ts';
import type { ResourceRef } from '../compiled.ts';

/** A rate that limits something, or null: rate 0 (or per 0) means no limit at that scope. */
export function rateOf(rate: number | undefined, per: number | undefined): CompiledRate | null {
  return rate && per && rate > 0 && per > 0 ? { rate, per } : null;
}

/**
 * Smoothing that acts, with every number it needs; null when it is off or absent. The
 * schema's rules require the numbers of enabled smoothing, so null is never a user's
 * enabled smoothing dropped.
 */
export function activeSmoothing(smoothing: Smoothing | null | undefined): CompiledSmoothing | null {
  if (!smoothing?.enabled) return null;
  const { threshold, step, trigger, delay } = smoothing;
  if (threshold === undefined || step === undefined || trigger === undefined || delay === undefined) return null;
  return { enabled: true, threshold, step, trigger, delay };
}

/** Disabled or absent smoothing is dropped, so the engine only sees smoothing that acts. */
export function smoothingOf(smoothing: Smoothing | undefined, rate: CompiledRate | null): CompiledSmoothing | null {
  const active = activeSmoothing(smoothing);
  if (active === null) return null;
  // Kept without a rate, where it smooths nothing, so the limits read can say so (docs/behaviour.md#smoothing).
  if (rate === null) return active;
  return { ...active, threshold: Math.min(active.threshold, rate.rate) };
}

interface KeyLimitFields {
  rate?: number | undefined;
  per?: number | undefined;
  quota_max?: number | undefined;
  quota_renewal_rate?: number | undefined;
  throttle_interval?: number | undefined;
  throttle_retry_limit?: number | undefined;
  smoothing?: Smoothing | undefined;
}

/** Key-level limit fields with their defaults (quota -1 = unlimited, no throttling). */
export function keyLimitOf(fields: KeyLimitFields): CompiledKeyLimit {
  const rate = rateOf(fields.rate, fields.per);
  return {
    rate,
    quota_max: fields.quota_max ?? -1,
    quota_renewal_rate: fields.quota_renewal_rate ?? 0,
    throttle_interval: fields.throttle_interval ?? 0,
    throttle_retry_limit: fields.throttle_retry_limit ?? 0,
    smoothing: smoothingOf(fields.smoothing, rate),
  };
}

/** Key-level per-endpoint limits of one access right, flattened to one rule per method. */
export function keyEndpointLimits(
  endpoints: PolicyAccessRight['endpoints'],
  ref: ResourceRef,
  field: string,
): { limits: CompiledEndpointLimit[]; problems: CompileProblem[] } {
  const limits: CompiledEndpointLimit[] = [];
  const problems: CompileProblem[] = [];
  (endpoints ?? []).forEach((endpoint, i) => {
    const compiled = regexPathPattern(endpoint.path);
    if (!compiled.ok) {
      problems.push({
        ref,
        field: `${field}[${i}].path`,
        reason: 'InvalidRegex',
        message: compiled.message,
      });
      return;
    }
    for (const method of endpoint.methods) {
      const rate = rateOf(method.limit.rate, method.limit.per);
      if (rate) limits.push({ path: endpoint.path, pattern: compiled.pattern, method: method.name, ...rate });
    }
  });
  return { limits, problems };
}
