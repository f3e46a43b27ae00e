import type { Session } from '../../crds/session.ts';

const cache = new WeakMap<Session, readonly string[]>();

/**
 * Ids (`namespace/name`) of the policies a session applies: `apply_policies` plus the
 * older single `apply_policy_id`, once each. Access and limits both read this one list,
 * so a policy that grants a key an API always brings its limits along. Kept per session
 * object, which the session cache shares between requests.
 */
export function appliedPolicyIds(session: Session): readonly string[] {
  let ids = cache.get(session);
  if (ids === undefined) {
    const names = session.apply_policy_id ? [...session.apply_policies, session.apply_policy_id] : session.apply_policies;
    ids = [...new Set(names)].map((name) => `${session.namespace}/${name}`);
    cache.set(session, ids);
  }
  return ids;
}
