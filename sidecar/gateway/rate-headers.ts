import type { GatewaySettings } from '../../crds/settings.ts';
import type { LimitDecision, RateHeaderData } from '../limits/types.ts';

function render(data: RateHeaderData): Record<string, string> {
  return {
    'x-ratelimit-limit': String(data.limit),
    'x-ratelimit-remaining': String(Math.max(0, data.remaining)),
    'x-ratelimit-reset': String(data.reset),
  };
}

/**
 * X-RateLimit-* per `rate_limit_response_headers` (docs/behaviour.md#response-headers): quota data under `quotas`
 * (only when a quota applies), rate limit data under `rate_limits` (only when a rate limit
 * applies, refusals included). Null means the gateway sets none and the upstream's pass.
 */
export function rateHeadersFor(
  decision: LimitDecision,
  mode: GatewaySettings['rate_limit_response_headers'],
): Record<string, string> | null {
  const data = mode === 'quotas' ? decision.quota : decision.rate;
  return data === null ? null : render(data);
}
