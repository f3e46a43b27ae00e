import type { PolicyStatus } from '../../crds/schemas/policy.ts';
import { apiIdOf, apiIdsOfChange, coveredApiIds, grantedApiIds, policyProblem, type Problem } from '../config/compile-api.ts';
import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { forObjects, requestFor, specChanged, watches, watchesStatus, type Watch, type WatchEvent } from '../kit/watch.ts';
import { EVERY_API } from '../../crds/policy-coverage.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import { readyCondition, type DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

type Api = GwObject<'ApiDefinition'>;

/** How many Keys a Policy's status names (their count is given whole). */
const KEYS_NAMED = 20;

/**
 * Policy status: Ready, or why not (an API it grants does not exist — deleting an API is
 * never blocked by the policies granting it, they turn not Ready instead — or the policy
 * itself is invalid, or an API it covers is refused and serves its last good config without
 * it), and back-links: the api_ids it grants that exist and the Keys using it (their count,
 * and their names in the message).
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
      // An API refused, or served again, decides whether the policies covering it are in force there.
      watchesStatus(apis, (event) => {
        if (!servingChanged(event)) return [];
        const ids = [...apiIdsOfChange(event), EVERY_API];
        return ids.flatMap((id) => policiesByCoveredApi.get(id)).map(requestFor);
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
    const problem = policyProblem(policy, granted.flatMap((apiId) => apisById.get(apiId))) ?? this.#notServed(policy);
    const desired: DesiredStatus<PolicyStatus> = problem
      ? { ready: false, ...problem, fields }
      : { ready: true, reason: 'Valid', message: `${granted.length > 0 ? `grants ${granted.length} API(s)` : 'grants no API: its limits cover every API its keys may call'}; used by ${describeKeys(keys)}`, fields };
    await setStatus(this.#ctx, 'Policy', policy, desired);
  }

  /**
   * The APIs the policy covers that a refusal keeps it from (docs/behaviour.md#bad-edits): one
   * serving the config kept from before, without the policy in it (a new grant past
   * ConfigTooLarge, say), and one the policy names that has never been served. An ApiDefinition
   * not yet reconciled has no say: it is compiled with the policy.
   */
  #notServed(policy: GwObject<'Policy'>): Problem | undefined {
    const ref = `${policy.metadata.namespace}/${policy.metadata.name}`;
    const { apis } = this.#ctx.caches;
    const { apisById } = this.#ctx.indexes;
    const covered = coveredApiIds(policy);
    // A policy naming no API is not kept from one that serves nothing: no key reaches that API.
    const everyApi = covered.includes(EVERY_API);
    const ids = everyApi ? new Set(apis.list().map(apiIdOf)) : covered;
    const kept: string[] = [];
    for (const id of ids) {
      const withId = apisById.get(id);
      // Of several ApiDefinitions with one api_id, one serves it (DuplicateApiId): the others' refusals are not the policy's concern.
      if (withId.some((api) => readyCondition(api)?.status === 'True' || api.status?.policies?.includes(ref) === true)) continue;
      const refused = withId.find((api) => readyCondition(api)?.status === 'False' && (api.status?.policies !== undefined || !everyApi));
      if (refused === undefined) continue;
      const serving = refused.status?.policies !== undefined ? 'serves its last good config, without this Policy' : 'has never been served';
      kept.push(`api_id "${id}": ApiDefinition ${refused.metadata.namespace}/${refused.metadata.name} is ${readyCondition(refused)!.reason} and ${serving}`);
    }
    if (kept.length === 0) return undefined;
    return { reason: 'NotInForce', message: `not in force on ${kept.sort().join('; ')}` };
  }
}

/** An ApiDefinition turned Ready or not, or changed the policies in force on it. */
function servingChanged(event: WatchEvent<Api>): boolean {
  const [before, after] = [event.old, event.verb === 'delete' ? undefined : event.object];
  const ready = (api: Api | undefined): string | undefined => (api ? readyCondition(api)?.status : undefined);
  return ready(before) !== ready(after) || (before?.status?.policies ?? []).join() !== (after?.status?.policies ?? []).join();
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
