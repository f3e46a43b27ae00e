import type { GatewaySettings } from '../../crds/settings.ts';

export type Algorithm = 'drl' | 'sliding_log' | 'sentinel' | 'fixed_window';

/** The gateway-wide mode: one algorithm, or `dynamic` (drl_threshold) choosing per limit. */
export type AlgorithmMode = Algorithm | 'dynamic';

/**
 * Precedence when several flags are set: fixed window > sentinel > sliding log. An
 * explicitly enabled algorithm also wins over drl_threshold, which only switches between
 * the Distributed Rate Limiter and the sliding log (docs/behaviour.md#dynamic-algorithm-selection).
 */
export function algorithmMode(settings: GatewaySettings): AlgorithmMode {
  if (settings.enable_fixed_window_rate_limiter) return 'fixed_window';
  if (settings.enable_sentinel_rate_limiter) return 'sentinel';
  if (settings.enable_redis_rolling_limiter) return 'sliding_log';
  return settings.drl_threshold > 0 ? 'dynamic' : 'drl';
}

/** Whether the DRL may be used, so the gateway beats its heartbeat and counts the live gateways (only the DRL and drl_threshold's choice need them). */
export const usesHeartbeats = (mode: AlgorithmMode): boolean => mode === 'drl' || mode === 'dynamic';

/**
 * docs/behaviour.md#dynamic-algorithm-selection: the DRL is used when the limit in requests per second exceeds
 * drl_threshold × live gateways, otherwise the sliding log.
 */
export function algorithmFor(
  mode: AlgorithmMode,
  limit: { rate: number; perMs: number },
  drlThreshold: number,
  gateways: number,
): Algorithm {
  if (mode !== 'dynamic') return mode;
  const perSecond = limit.rate / (limit.perMs / 1000);
  return perSecond > drlThreshold * gateways ? 'drl' : 'sliding_log';
}

/** A gateway's DRL share: floor(rate / n), at least 1 (docs/behaviour.md#algorithms). */
export function drlShare(rate: number, gateways: number): number {
  return Math.max(1, Math.floor(rate / Math.max(1, gateways)));
}
