import type { IncomingHttpHeaders } from 'node:http';
import type { MaybePromise } from '../../common/maybe-promise.ts';
import type { CompiledPolicy } from '../../crds/compiled.ts';
import { appliedPolicyIds, type Session } from '../../crds/session.ts';
import { gatewayErrors, type GatewayError } from '../http/errors.ts';
import type { SessionCache } from './session-cache.ts';

export type AuthResult = { ok: true; session: Session; keyHash: string } | { ok: false; error: GatewayError };

const bearer = /^bearer(?:\s+(.*))?$/i;

/** The raw key from the API's auth header; `Bearer <key>` is accepted as well as the bare key. */
export function extractKey(headers: IncomingHttpHeaders, headerName: string): string | null {
  const raw = headers[headerName];
  const value = (Array.isArray(raw) ? raw[0] : raw)?.trim();
  if (!value) return null;
  const scheme = bearer.exec(value);
  const key = scheme === null ? value : (scheme[1] ?? '').trim();
  return key.length > 0 ? key : null;
}

function policyGrants(session: Session, apiId: string, policies: Readonly<Record<string, CompiledPolicy>>): boolean {
  for (const id of appliedPolicyIds(session)) {
    if (policies[id]?.access_rights[apiId] !== undefined) return true;
  }
  return false;
}

/** Why a found session may still not call an API. */
export type AccessRefusal = 'inactive' | 'expired' | 'not_granted';

/** Why a found session may not call this API (inactive, expired, or not granted it); null when it may. */
export function accessRefusal(
  session: Session,
  apiId: string,
  policies: Readonly<Record<string, CompiledPolicy>>,
  nowSeconds: number,
): AccessRefusal | null {
  if (session.is_inactive) return 'inactive';
  if (session.expires > 0 && session.expires < nowSeconds) return 'expired';
  return session.access_rights[apiId] !== undefined || policyGrants(session, apiId, policies) ? null : 'not_granted';
}

const storeUnavailable: AuthResult = { ok: false, error: gatewayErrors.sessionStoreUnavailable };

/**
 * Auth-token authentication (docs/behaviour.md#gateway-answers): 401 without a key, 403 for any
 * key that may not call the API. A key whose session is cached is answered without a promise.
 */
export function authenticate(
  headers: IncomingHttpHeaders,
  headerName: string,
  apiId: string,
  policies: Readonly<Record<string, CompiledPolicy>>,
  sessions: SessionCache,
): MaybePromise<AuthResult> {
  const rawKey = extractKey(headers, headerName);
  if (rawKey === null) return { ok: false, error: gatewayErrors.authMissing };
  const keyHash = sessions.keyHashOf(rawKey);
  let session: MaybePromise<Session | null>;
  try {
    session = sessions.get(keyHash);
  } catch {
    return storeUnavailable;
  }
  // A store that fails is answered with 503, whether it threw above or rejects here. A key
  // found in the store is remembered, so its hash comes from memory while it is in use.
  if (session instanceof Promise) {
    return session.then(
      (read) => {
        if (read !== null) sessions.rememberKey(rawKey, keyHash);
        return admitSession(read, keyHash, apiId, policies);
      },
      () => storeUnavailable,
    );
  }
  return admitSession(session, keyHash, apiId, policies);
}

function admitSession(session: Session | null, keyHash: string, apiId: string, policies: Readonly<Record<string, CompiledPolicy>>): AuthResult {
  if (session === null || accessRefusal(session, apiId, policies, Date.now() / 1000) !== null) {
    return { ok: false, error: gatewayErrors.accessDenied };
  }
  return { ok: true, session, keyHash };
}
