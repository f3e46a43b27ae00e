import type { PolicyStatus } from '../../crds/schemas/policy.ts';
import { apiIdsOfChange, grantedApiIds, policyProblem } from '../config/compile-api.ts';
import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { forObjects, requestFor, specChanged, watches, type Watch } from '../kit/watch.ts';
import type { DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

/** How many Keys a Policy's status names (their count is given whole). */
const KEYS_NAMED = 20;

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
    const { policiesByCoveredApi } = ctx.indexes;
    this.watches = [
      forObjects(policies),
      // An API appearing, changing (its api_id too: the old one's policies) or going changes whether the policies granting it are Ready.
      watches(apis, (event) => {
        if (!specChanged(event)) return [];
        const ids = apiIdsOfChange(event);
        return [...ids].flatMap((id) => policiesByCoveredApi.get(id)).map(requestFor);
      }),
      // A key's apply_policies changes the key count of the policies it names, and of those it named before.
      watches(keys, (event) => {
        if (!specChanged(event)) return [];
        const names = new Set([...(event.old?.spec.apply_policies ?? []), ...(event.object.spec.apply_policies ?? [])]);
        return [...names].map((name) => ({ namespace: event.object.metadata.namespace, name }));
      }),
    ];
  }

  async reconcile({ namespace, name }: Request): Promise<void> {
    const policy = this.#ctx.caches.policies.get(namespace, name);
    if (!policy || policy.metadata.deletionTimestamp) return;
    const granted = grantedApiIds(policy);
    const { apisById, keysByPolicy } = this.#ctx.indexes;
    const keys = keysByPolicy.namesIn(name, namespace);
    const fields = { apis: granted.filter((apiId) => apisById.has(apiId)), keys: keys.size };
    const problem = policyProblem(policy, granted.flatMap((apiId) => apisById.get(apiId)));
    const desired: DesiredStatus<PolicyStatus> = problem
      ? { ready: false, ...problem, fields }
      : { ready: true, reason: 'Valid', message: `${granted.length > 0 ? `grants ${granted.length} API(s)` : 'grants no API: its limits cover every API its keys may call'}; used by ${describeKeys(keys)}`, fields };
    await setStatus(this.#ctx, 'Policy', policy, desired);
  }
}

/** How many Keys, and the first names in code-unit order: a partial selection, as a Policy may have 100,000 Keys. */
function describeKeys(keys: ReadonlySet<string>): string {
  if (keys.size === 0) return 'no keys';
  const first: string[] = [];
  for (const name of keys) {
    if (first.length === KEYS_NAMED && name >= first[KEYS_NAMED - 1]!) continue;
    const at = first.findIndex((other) => name < other);
    first.splice(at === -1 ? first.length : at, 0, name);
    if (first.length > KEYS_NAMED) first.pop();
  }
  return `${keys.size} key(s): ${first.join(', ')}${keys.size > KEYS_NAMED ? ', …' : ''}`;
}
