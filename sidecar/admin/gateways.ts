import type { LiveGatewaysAnswer } from '../../crds/admin-answers.ts';
import { algorithmMode, usesHeartbeats } from '../limits/algorithm.ts';
import { requireSecret } from './auth.ts';
import { AdminError, adminErrors } from './errors.ts';
import type { HandlerContext, Reply } from './types.ts';

/**
 * GET /gw/gateways (docs/behaviour.md#admin-operations): for each API this gateway has
 * loaded, the gateways whose heartbeat is live, as the DRL counts them. Gateways beat only
 * while the DRL may be used, so under another algorithm the lists are empty and
 * `heartbeats` says why: neither the heartbeats a gateway left in Redis before its algorithm
 * changed nor, without Redis, the gateway itself are listed then.
 */
export async function liveGatewaysRead(ctx: HandlerContext): Promise<Reply> {
  const { req, deps } = ctx;
  requireSecret(req, 'x-gw-authorization', deps.auth.adminSecret, adminErrors.gatewayKeyInvalid);
  const apiIds = deps.limits.apis().map((api) => api.api_id).sort();
  const heartbeats = usesHeartbeats(algorithmMode(deps.limits.state().settings));
  let live = new Map<string, string[]>();
  if (heartbeats) {
    try {
      live = await deps.gateways.live(apiIds);
    } catch (error) {
      throw new AdminError(adminErrors.gatewaysUnavailable, undefined, { cause: error });
    }
  }
  const body: LiveGatewaysAnswer = { heartbeats, apis: apiIds.map((apiId) => ({ api_id: apiId, gateways: live.get(apiId) ?? [] })) };
  return { status: 200, body };
}
