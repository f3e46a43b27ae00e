import type { CompiledSmoothing } from '../../../crds/compiled.ts';

export interface SmoothingState {
  allowance: number;
  /** Unix ms of the last change; 0 before the first. */
  changedAt: number;
}

/**
 * One smoothing step (docs/behaviour.md#smoothing) for a request rate of `requests` in the current window
 * (counted before the request at hand, so an idle window reads 0 and the allowance can
 * fall all the way back to `threshold`).
 * Raised by `step` (up to `rate`) when the rate rises above allowance − step × trigger,
 * lowered by `step` (down to `threshold`) when it falls below allowance − step × (1 + trigger),
 * at most once per `delay`. The Lua script in limits.lua implements the same rule for Redis.
 */
export function smoothStep(
  state: SmoothingState,
  requests: number,
  rate: number,
  settings: CompiledSmoothing,
  nowMs: number,
): SmoothingState {
  if (nowMs - state.changedAt < settings.delay * 1000) return state;
  const { allowance } = state;
  if (requests > allowance - settings.step * settings.trigger && allowance < rate) {
    return { allowance: Math.min(rate, allowance + settings.step), changedAt: nowMs };
  }
  if (requests < allowance - settings.step * (1 + settings.trigger) && allowance > settings.threshold) {
    return { allowance: Math.max(settings.threshold, allowance - settings.step), changedAt: nowMs };
  }
  return state;
}
