import type { IncomingMessage } from 'node:http';
import { ReviewNotPermittedError, type AccessCheck, type BearerAuthenticator, type BearerPrincipal } from './bearer.ts';
import { AdminError, adminErrors, type ErrorDef } from './errors.ts';
import { singleHeader } from './request.ts';
import { secretMatches } from './secret.ts';

/** A shared-secret header (Admin-Auth, X-GW-Authorization, the portal's Authorization). */
export function requireSecret(req: IncomingMessage, header: string, secret: string, refusal: ErrorDef): void {
  if (!secretMatches(singleHeader(req, header), secret)) throw new AdminError(refusal);
}

const bearerPattern = /^Bearer +([^\s]+)$/i;

/** A review that could not be made: 403 when this gateway may not make it at all, else a fault (500). */
function reviewError(error: unknown): AdminError {
  const refusal = error instanceof ReviewNotPermittedError ? adminErrors.reviewsNotPermitted : adminErrors.authCheckFailed;
  return new AdminError(refusal, undefined, { cause: error });
}

/** `Authorization: Bearer <token>` → the caller; 401 when absent, malformed or not valid. */
export async function requireBearer(req: IncomingMessage, bearer: BearerAuthenticator): Promise<BearerPrincipal> {
  const token = bearerPattern.exec(singleHeader(req, 'authorization') ?? '')?.[1];
  if (!token) throw new AdminError(adminErrors.bearerMissing);
  let principal: BearerPrincipal | null;
  try {
    principal = await bearer.authenticate(token);
  } catch (error) {
    throw reviewError(error);
  }
  if (!principal) throw new AdminError(adminErrors.bearerMissing);
  return principal;
}

/** 403 naming the path unless the caller passes every check. */
export async function requireAccess(principal: BearerPrincipal, checks: readonly AccessCheck[], path: string): Promise<void> {
  let results: boolean[];
  try {
    results = await Promise.all(checks.map((check) => principal.can(check)));
  } catch (error) {
    throw reviewError(error);
  }
  if (results.includes(false)) throw new AdminError(adminErrors.bearerForbidden, path);
}

/** One check per namespace the store covers, or one cluster-wide check when it covers all. */
export function scopeChecks(
  namespaces: readonly string[],
  verb: AccessCheck['verb'],
  resource: AccessCheck['resource'],
): AccessCheck[] {
  return namespaces.length === 0 ? [{ verb, resource }] : namespaces.map((namespace) => ({ verb, resource, namespace }));
}
