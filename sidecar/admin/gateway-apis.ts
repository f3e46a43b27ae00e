import { requireSecret } from './auth.ts';
import { AdminError, adminErrors } from './errors.ts';
import { pathId } from './params.ts';
import type { HandlerContext, Reply } from './types.ts';

/**
 * DELETE /gw/apis/{apiID} (docs/behaviour.md#admin-operations): the definition leaves the store (the resource in a
 * cluster, its YAML document in a folder) but stays loaded and served until a reload
 * (docs/behaviour.md#api-states).
 */
export async function deleteApi(ctx: HandlerContext): Promise<Reply> {
  const { req, deps } = ctx;
  requireSecret(req, 'x-gw-authorization', deps.auth.adminSecret, adminErrors.gatewayKeyInvalid);
  const apiId = pathId(ctx.params.apiID!, 'apiID');
  let deleted: boolean;
  try {
    deleted = await deps.resources.deleteApi(apiId);
  } catch (error) {
    throw new AdminError(adminErrors.deleteFailed, undefined, { cause: error });
  }
  if (!deleted) throw new AdminError(adminErrors.apiNotFound);
  ctx.log.info({ apiId }, 'API definition deleted; still served until reload');
  return { status: 200, body: { key: apiId, status: 'ok', action: 'deleted' } };
}

/**
 * GET /gw/reload: releases what deletes retained (in a cluster every sidecar then unloads
 * those APIs) and reloads this gateway's config.
 */
export async function reload(ctx: HandlerContext): Promise<Reply> {
  const { req, deps } = ctx;
  requireSecret(req, 'x-gw-authorization', deps.auth.adminSecret, adminErrors.gatewayKeyInvalid);
  try {
    const released = await deps.resources.releaseDeleted();
    await deps.runtime.reload();
    ctx.log.info({ released }, 'gateway reloaded');
  } catch (error) {
    throw new AdminError(adminErrors.reloadFailed, undefined, { cause: error });
  }
  return { status: 200, body: { status: 'ok', message: '' } };
}
