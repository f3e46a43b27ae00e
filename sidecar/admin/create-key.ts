import { randomBytes } from 'node:crypto';
import { sessionFromKey } from '../../common/session-from-key.ts';
import { keyHash } from '../../crds/key-hash.ts';
import type { Session, SessionAccessRight, Smoothing } from '../../crds/session.ts';
import { requireSecret } from './auth.ts';
import { AdminError, adminErrors, MAX_BODY_BYTES } from './errors.ts';
import { keySpecOf } from './key-request.ts';
import { readJsonBody } from './request.ts';
import type { HandlerContext, Reply } from './types.ts';

/** 32 random bytes, URL-safe: what the caller sends in the API's auth header. */
const generateRawKey = (): string => randomBytes(32).toString('base64url');

/**
 * The Key resource's name and the session's `key_id`: a public id derived from the hash,
 * so it identifies the key in kubectl and logs without revealing it.
 */
const keyNameOf = (hash: string): string => `key-${hash.slice(0, 24)}`;

/** Smoothing switched off, every field present: what a key without smoothing answers. */
const smoothingOff: Smoothing = { enabled: false, threshold: 0, step: 0, trigger: 0, delay: 0 };

/** An access right of the create-key answer's `data` (`recordAccessRight`). */
type RecordAccessRight = Omit<SessionAccessRight, 'limit'> & { limit?: Omit<NonNullable<SessionAccessRight['limit']>, 'smoothing'> & { smoothing: Smoothing } };

/** The create-key answer's `data`. */
type KeyRecord = Omit<Session, 'namespace' | 'key_uid' | 'access_rights' | 'smoothing'> & { access_rights: Record<string, RecordAccessRight>; smoothing: Smoothing };

/**
 * An access right as the key record answers it: a right without a limit of its own has no
 * `limit` (the session keeps null), and a limit without smoothing has it switched off, so
 * the answer's `access_rights` can be sent back as they are.
 */
function recordAccessRight({ limit, ...right }: SessionAccessRight): RecordAccessRight {
  return limit === null ? right : { ...right, limit: { ...limit, smoothing: limit.smoothing ?? smoothingOff } };
}

/**
 * The response's `data`: the stored session as the key record types it. The record's
 * `smoothing` is an object, so a key without smoothing gets it switched off rather than
 * null (the session keeps null, which the limiters read as "no smoothing"), and so does each
 * access right's (`recordAccessRight`). `namespace` and `key_uid` are gw's own and stay out.
 */
function keyRecordOf(session: Session): KeyRecord {
  const { namespace: _namespace, key_uid: _keyUid, access_rights: accessRights, ...record } = session;
  const access_rights = Object.fromEntries(Object.entries(accessRights).map(([apiId, right]) => [apiId, recordAccessRight(right)]));
  return { ...record, access_rights, smoothing: session.smoothing ?? smoothingOff };
}

/**
 * POST /admin/org/keys (docs/behaviour.md#admin-operations). The session is stored first so the key works the
 * moment the caller has it; if the Key resource cannot be written the session is removed
 * again, so a failure leaves nothing behind. The raw key is returned once, as the
 * response's `key_id` (the credential, as the dashboard API returns it); everything
 * stored holds only its hash, and `data.key_id` is the public id.
 */
export async function createKey(ctx: HandlerContext): Promise<Reply> {
  const { req, res, deps } = ctx;
  requireSecret(req, 'admin-auth', deps.auth.adminSecret, adminErrors.adminKeyInvalid);
  const body = await readJsonBody(req, res, deps.maxBodyBytes ?? MAX_BODY_BYTES);
  const rawKey = generateRawKey();
  const hash = keyHash(rawKey);
  const name = keyNameOf(hash);
  const spec = keySpecOf(body, hash);
  // The same derivation the operator and the folder source apply to a Key, so neither rewrites this session.
  const derived = sessionFromKey(spec, { name, namespace: deps.namespace }, null, new Date());
  if (!derived.ok) throw new AdminError(adminErrors.bodyInvalid, derived.message);
  const { session } = derived;

  try {
    await deps.sessions.put(hash, session);
  } catch (error) {
    // A write that timed out may still run once Redis answers again (a stall, a paused server),
    // leaving a session of a key nobody was given. A delete sent after it on the same
    // connection runs after it; it is not waited for, since it waits on the same stall.
    deps.sessions.delete(hash).catch((rollbackError: unknown) => {
      ctx.log.warn({ err: rollbackError, keyName: name }, 'create key: could not remove a session whose write failed');
    });
    throw new AdminError(adminErrors.keySaveFailed, undefined, { cause: error });
  }
  try {
    await deps.resources.createKey({ namespace: deps.namespace, name, spec });
  } catch (error) {
    await deps.sessions.delete(hash).catch((rollbackError: unknown) => {
      ctx.log.error({ err: rollbackError, keyName: name }, 'create key: could not remove the session after the Key write failed');
    });
    throw new AdminError(adminErrors.keySaveFailed, undefined, { cause: error });
  }
  ctx.log.info({ keyName: name, namespace: deps.namespace }, 'key created');
  return { status: 200, body: { api_model: {}, data: keyRecordOf(session), key_hash: hash, key_id: rawKey } };
}
