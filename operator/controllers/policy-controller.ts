import type { PolicyStatus } from '../../crds/schemas/policy.ts';
import { apiIdOf, grantedApiIds, policyProblem } from '../config/compile-api.ts';
import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { forObjects, requestFor, specChanged, watches, type Watch } from '../kit/watch.ts';
import type { DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

/**
 * Policy status: Ready, or why not (an API it grants does not exist — deleting an API is
 * never blocked by the policies granting it, they turn not Ready instead — or the policy
 * itself is invalid), and back-links: the api_ids it grants that exist and the Keys
 * using it (their count, and their names in the message).
 * The APIs' ConfigMaps are rewritten by the ApiDefinition controller, which watches policies.
 */
export class PolicyController implements KindController {
  readonly kind = 'Policy';
  readonly watches: Watch[];
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    const { apis, keys, policies } = ctx.caches;
    this.watches = [
      forObjects(policies),
      // An API appearing, changing or going changes whether the policies granting it are Ready.
      watches(apis, (event) => {
        if (!specChanged(event)) return [];
        const apiId = apiIdOf(event.object);
        return policies.list().filter((policy) => grantedApiIds(policy).includes(apiId)).map(requestFor);
      }),
      // A key's apply_policies changes the key count of the policies it names.
      watches(keys, (event) =>
        specChanged(event) ? (event.object.spec.apply_policies ?? []).map((name) => ({ namespace: event.object.metadata.namespace, name })) : [],
      ),
    ];
  }

  async reconcile({ namespace, name }: Request): Promise<void> {
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
    await setStatus(this.#ctx, 'Policy', policy, desired);
  }
}

function describeKeys(keys: string[]): string {
  if (keys.length === 0) return 'no keys';
  const shown = keys.slice(0, 20).join(', ');
  return `${keys.length} key(s): ${shown}${keys.length > 20 ? ', …' : ''}`;
}
