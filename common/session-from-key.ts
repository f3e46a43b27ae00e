import { sameData } from './same-data.ts';
import { activeSmoothing } from '../crds/compile/limits.ts';
import { countedQuotaPeriod } from '../crds/quota-times.ts';
import { sessionSchema, type Session, type SessionInput } from '../crds/session.ts';
import { unknownFields } from '../crds/openapi/unknown-fields.ts';
import { keySpecSchema, type KeySpec } from '../crds/schemas/key.ts';

/** Session fields the gateway moves at run time: taken from the spec when the session is created, then left alone. */
const RUNTIME_FIELDS = ['quota_remaining', 'quota_renews', 'date_created', 'last_check', 'data_expires'] as const;
type RuntimeFields = Pick<SessionInput, (typeof RUNTIME_FIELDS)[number]>;

/** `changed`: the session differs from the existing one (or there is none), so it is to be written. */
export type SessionOutcome = { ok: true; session: Session; changed: boolean } | { ok: false; message: string };

/** A session keeps only smoothing that acts: switched off, it is null, as when absent. */
function accessRights(spec: KeySpec): NonNullable<SessionInput['access_rights']> {
  return Object.fromEntries(
    Object.entries(spec.access_rights ?? {}).map(([apiId, right]) => [
      apiId,
      { ...right, api_id: apiId, limit: right.limit ? { ...right.limit, smoothing: activeSmoothing(right.limit.smoothing) } : null },
    ]),
  );
}

/**
 * The Key resource a session stands for. `uid` is known once the resource exists in a cluster
 * (the operator's reconcile); Events about the key name it, which `kubectl describe gwkey`
 * selects them by.
 */
export interface KeyIdentity {
  name: string;
  namespace: string;
  uid?: string | undefined;
}

/**
 * The session a Key resource stands for (docs/behaviour.md#limits-and-their-scopes, docs/behaviour.md#admin-operations): its spec fields, `allowance`
 * set to `rate`, the Key's namespace (how apply_policies resolve), and, when a
 * session already exists, its run-time fields (and the fields no spec sets) kept. `last_updated` moves only when the
 * content changes, and `changed` says whether there is anything to write, so an unchanged Key
 * rewrites nothing.
 */
export function sessionFromKey(spec: unknown, key: KeyIdentity, existing: Session | null, now: Date): SessionOutcome {
  const parsed = keySpecSchema.safeParse(spec ?? {});
  if (!parsed.success) return { ok: false, message: firstIssue('spec', parsed.error) };
  // A misspelt field (`is_inactve`) would be dropped by the parse and the key served as if it were not there.
  const unknown = unknownFields(keySpecSchema, spec ?? {});
  if (unknown.length > 0) return { ok: false, message: `spec.${unknown[0]}: Key has no such field (misspelt?); kubectl apply refuses it too` };
  const s = parsed.data;
  const runtime: RuntimeFields = existing ? Object.fromEntries(RUNTIME_FIELDS.map((f) => [f, existing[f]])) : initialRuntime(s, now);
  const fromSpec = specFields(s, key, existing);
  // Every field the spec owns comes from the spec alone: one the spec no longer sets falls
  // back to its default (`kubectl apply` without `is_inactive` reactivates the key), where a
  // merge over the existing session kept its last value.
  const kept = existing ? withoutFields(existing, Object.keys(fromSpec)) : {};
  const merged = { ...kept, ...stripUndefined(fromSpec), ...stripUndefined(runtime) };
  const candidate = sessionSchema.safeParse({ ...merged, last_updated: existing?.last_updated ?? now.toISOString() });
  if (!candidate.success) return { ok: false, message: firstIssue(null, candidate.error) };
  const session = candidate.data;
  const changed = existing === null || !sameData(session, existing);
  if (existing && changed) session.last_updated = now.toISOString();
  return { ok: true, session, changed };
}

/**
 * The first issue, at its field's path under `root` (the spec's, or none for the session's own
 * fields); an issue of the whole spec, such as a rule between two of its fields, at `root` itself.
 */
function firstIssue(root: 'spec' | null, error: { issues: Array<{ path: PropertyKey[]; message: string }> }): string {
  const issue = error.issues[0];
  const path = [...(root === null ? [] : [root]), ...(issue?.path.map(String) ?? [])];
  return `${path.length > 0 ? path.join('.') : 'session'}: ${issue?.message ?? 'invalid'}`;
}

/**
 * The fields the Key owns: its spec's, its namespace, its name and its uid (kept while the caller
 * does not know it). A session another Key takes over (of two with one hash) becomes that Key's:
 * its Events and `kubectl gw limits` name the Key now holding it.
 */
function specFields(s: KeySpec, key: KeyIdentity, existing: Session | null): SessionInput {
  return {
    key_id: key.name,
    key_uid: key.uid ?? existing?.key_uid ?? '',
    alias: s.alias,
    rate: s.rate,
    per: s.per,
    // SPEC §2.4: the gateway sets `allowance` and `rate` to the same value, whatever the Key gave.
    allowance: s.rate,
    apply_policies: s.apply_policies,
    access_rights: accessRights(s),
    enable_detailed_recording: s.enable_detailed_recording,
    expires: s.expires,
    hmac_enabled: s.hmac_enabled,
    is_inactive: s.is_inactive,
    meta_data: s.meta_data,
    org_id: s.org_id,
    quota_max: s.quota_max,
    quota_renewal_rate: s.quota_renewal_rate,
    smoothing: activeSmoothing(s.smoothing),
    tags: s.tags,
    throttle_interval: s.throttle_interval,
    throttle_retry_limit: s.throttle_retry_limit,
    namespace: key.namespace,
  };
}

/**
 * A new session's run-time fields. A quota that renews starts its first period now, unless
 * the spec says when it renews: `quota_remaining` counts for that period (the limit engine
 * seeds a quota from the session only while its renewal time is ahead), where a renewal time
 * of 0 would have let the first request find the period over and the quota full.
 */
function initialRuntime(s: KeySpec, now: Date): RuntimeFields {
  // Counted as the limit engine counts it: a period near the field's bound would otherwise end
  // past the largest time the session may hold, and the key be refused for a field not given.
  const renewal = countedQuotaPeriod(s.quota_renewal_rate ?? 0);
  const quotaRenews = s.quota_renews ?? (renewal > 0 ? Math.floor(now.getTime() / 1000) + renewal : undefined);
  // A period never has more left than the quota's max (the limit engine counts no more), and
  // a negative count (-1, the field's "unset") starts it full, as the limit engine does.
  const max = s.quota_max ?? -1;
  const remaining = max > 0 && s.quota_remaining !== undefined ? (s.quota_remaining < 0 ? max : Math.min(s.quota_remaining, max)) : (s.quota_remaining ?? s.quota_max);
  return { quota_remaining: remaining, quota_renews: quotaRenews, date_created: now.toISOString() };
}

function withoutFields(session: Session, names: readonly string[]): Partial<Session> {
  const rest: Partial<Session> = { ...session };
  for (const name of names) delete rest[name as keyof Session];
  return rest;
}

/** The fields that are set: a spread of the result leaves the fields it lacks as they were. */
function stripUndefined<T extends object>(record: T): Partial<T> {
  return Object.fromEntries(Object.entries(record).filter(([, v]) => v !== undefined)) as Partial<T>;
}
