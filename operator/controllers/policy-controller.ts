import { kinds } from '../../crds/kinds.ts';
import type { PolicyStatus } from '../../crds/schemas/policy.ts';
import { apiIdOf, grantedApiIds, policyProblem } from '../config/compile-api.ts';
import { splitKey } from '../runtime/gw-object.ts';
import { nextStatus, type DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

/**
 * Policy status: Ready, or why not (an API it grants does not exist — deleting an API is
 * never blocked by the policies granting it, they turn not Ready instead — or the policy
 * itself is invalid), and back-links: the api_ids it grants that exist and the Keys
 * using it (their count, and their names in the message).
 * The APIs' ConfigMaps are rewritten by the ApiDefinition controller, which the policy's
 * watch events enqueue.
 */
export class PolicyController {
  readonly kind = kinds.Policy.kind;
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
  }

  async reconcile(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    const policy = this.#ctx.caches.policies.get(namespace, name);
    if (!policy || policy.metadata.deletionTimestamp) return;
    const granted = grantedApiIds(policy);
    const apis = this.#ctx.caches.apis.list();
    const known = new Set(apis.map(apiIdOf));
    const keys = this.#ctx.caches.keys
      .list(namespace)
      .filter((k) => (k.spec.apply_policies ?? []).includes(name))
      .map((k) => k.metadata.name)
      .sort();
    const fields = { apis: granted.filter((apiId) => known.has(apiId)), keys: keys.length };
    const problem = policyProblem(policy, apis);
    const desired: DesiredStatus<PolicyStatus> = problem
      ? { ready: false, ...problem, fields }
      : { ready: true, reason: 'Valid', message: `grants ${granted.length} API(s); used by ${describeKeys(keys)}`, fields };
    const status = nextStatus(policy, desired);
    if (!status) return;
    await this.#ctx.status.write('Policy', policy, status);
    if (!desired.ready) await this.#ctx.events.record(policy, 'Warning', desired.reason, desired.message);
  }
}

function describeKeys(keys: string[]): string {
  if (keys.length === 0) return 'no keys';
  const shown = keys.slice(0, 20).join(', ');
  return `${keys.length} key(s): ${shown}${keys.length > 20 ? ', …' : ''}`;
}
