import type { V1ConfigMap } from '@kubernetes/client-node';
import { apiNameOf, CONFIG_KEY, configMapName, MANAGED_BY, MANAGED_BY_LABEL, RETAIN_ANNOTATION, RETAINED_FOR_UID_ANNOTATION } from '../../common/compiled-config-map.ts';
import { flatKey } from '../../common/flat-key.ts';
import type { CompiledRate } from '../../crds/compiled.ts';
import type { ApiDefinitionStatus } from '../../crds/schemas/api-definition.ts';
import { EVERY_API } from '../../crds/policy-coverage.ts';
import { ApiCompiler, apiIdsOfChange, coveredApiIds, policiesOfConfigMap, type CompileInputs } from '../config/compile-api.ts';
import { asWritten, desiredConfigMap, MAX_CONFIG_BYTES, upToDate, withConfig, withHash } from '../config/config-map.ts';
import type { KindController } from '../kit/controller.ts';
import { setStatus } from '../kit/controllerutil.ts';
import type { Request, Result } from '../kit/reconciler.ts';
import { forObjects, owns, requestFor, specChanged, watches, type Watch } from '../kit/watch.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import type { DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

type Api = GwObject<'ApiDefinition'>;

const RETAIN_GRACE_MS = 15_000;
/** The ConfigMap's watch event normally brings the newer version sooner; this is the fallback. */
const STALE_CACHE_RETRY_MS = 1_000;

/** The API-level limit as `kubectl get gwapi` shows it (status.rate_limit). */
const rateLimitColumn = (limit: CompiledRate | null): string => (limit ? `${limit.rate}/${limit.per}s` : 'none');

/**
 * ApiDefinition → its compiled ConfigMap `gw-api-<name>` (the API, every policy granting
 * it, the gateway settings), rewritten only when the content changes, plus status.
 * A compile problem or an oversized config leaves the last written ConfigMap in place
 * (sidecars keep serving the last good config) and says why on the status; one deleted or
 * edited by hand meanwhile is written back as it was.
 */
export class ApiDefinitionController implements KindController {
  readonly kind = 'ApiDefinition';
  readonly watches: Watch[];
  readonly #ctx: ControllerContext;
  readonly #compiler: ApiCompiler;
  readonly #inputs: CompileInputs;
  /**
   * When each retained ConfigMap was first seen retained while its ApiDefinition still existed,
   * and the uid of the ApiDefinition whose delete retained it: a grace belongs to one delete,
   * never to a later one of an ApiDefinition of the same name.
   */
  readonly #retainedSince = new Map<string, { since: number; retainedFor: string | undefined }>();
  /**
   * The ConfigMap in force, with its config, of each ApiDefinition that the compile step
   * refuses or compiles with a refused granting Policy: what it keeps serving, and what is
   * written back if the ConfigMap is deleted meanwhile (docs/behaviour.md#bad-edits). Read from
   * the API server when the refusal is first seen (the cache keeps only a digest of the data),
   * then what the operator writes; dropped once the API compiles whole, or is deleted, so only
   * refused APIs cost memory.
   */
  readonly #inForce = new Map<string, V1ConfigMap>();

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    this.#compiler = new ApiCompiler(ctx.settings);
    this.#inputs = {
      allApis: () => ctx.caches.apis.list(),
      allPolicies: () => ctx.caches.policies.list(),
      apisWithId: (apiId) => ctx.indexes.apisById.get(apiId),
      policiesCovering: (apiId) => [...ctx.indexes.policiesByCoveredApi.get(apiId), ...ctx.indexes.policiesByCoveredApi.get(EVERY_API)],
    };
    const { apis, policies, configMaps } = ctx.caches;
    const covering = (policy: GwObject<'Policy'> | undefined): string[] => (policy ? coveredApiIds(policy) : []);
    this.watches = [
      forObjects(apis),
      // An API going, or changing its api_id, may leave that api_id to another ApiDefinition (DuplicateApiId until then).
      watches(apis, (event) => {
        if (!specChanged(event)) return [];
        const ids = apiIdsOfChange(event);
        const self = flatKey(event.object.metadata.namespace, event.object.metadata.name);
        return [...ids].flatMap((id) => ctx.indexes.apisById.get(id)).filter((api) => flatKey(api.metadata.namespace, api.metadata.name) !== self).map(requestFor);
      }),
      owns(configMaps, (cm) => {
        const apiName = apiNameOf(cm.metadata?.name ?? '');
        return apiName ? { namespace: cm.metadata?.namespace ?? '', name: apiName } : undefined;
      }),
      // A policy is compiled into each API it covers: now, and before the change; one without access_rights, into every API.
      watches(policies, (event) => {
        if (!specChanged(event)) return [];
        const ids = new Set([...covering(event.verb === 'delete' ? undefined : event.object), ...covering(event.old)]);
        if (ids.has(EVERY_API)) return apis.list().map(requestFor);
        return [...ids].flatMap((id) => ctx.indexes.apisById.get(id)).map(requestFor);
      }),
    ];
  }

  async reconcile({ namespace, name }: Request, signal: AbortSignal): Promise<Result | void> {
    const api = this.#ctx.caches.apis.get(namespace, name);
    if (!api || api.metadata.deletionTimestamp) {
      this.#compiler.forget(namespace, name);
      this.#inForce.delete(flatKey(namespace, name));
      return this.#cleanUp(namespace, name);
    }
    let outcome = this.#compiler.compile(api, this.#inputs);
    if (outcome.ok && outcome.refusedPolicies) {
      // A granting policy the compile step refuses keeps the version in force (docs/behaviour.md#bad-edits).
      const inForce = await this.#inForceConfigMap(api);
      outcome = this.#compiler.compile(api, this.#inputs, policiesOfConfigMap(inForce?.data?.[CONFIG_KEY]));
    }
    if (!outcome.ok) return this.#refuse(api, { ready: false, reason: outcome.reason, message: outcome.message, fields: { api_id: outcome.apiId } }, signal);
    const fields = { api_id: outcome.apiId, policies: outcome.policyIds, configMap: configMapName(name) };
    if (outcome.bytes > MAX_CONFIG_BYTES) {
      const message = `compiled config is ${outcome.bytes} bytes, over the ${MAX_CONFIG_BYTES}-byte limit of one ConfigMap: every Policy granting this API is copied into it whole (meta_data and endpoints too); make them fewer or smaller, or reduce the API's endpoints`;
      return this.#refuse(api, { ready: false, reason: 'ConfigTooLarge', message, fields }, signal);
    }
    const keepsRefused = outcome.refusedPolicies !== undefined;
    if (!keepsRefused) this.#inForce.delete(flatKey(namespace, name));
    signal.throwIfAborted();
    const desired = desiredConfigMap(api, outcome.apiId, outcome.hash);
    const json = (): string => outcome.json ?? this.#compiler.configJson(api, this.#inputs);
    const result = await this.#writeConfigMap(api, desired, json, outcome.policyIds.length, keepsRefused);
    if (result === 'taken') {
      const message = `ConfigMap ${configMapName(name)} exists and is not this ApiDefinition's (it has neither the operator's label nor an owner reference to it): the operator neither uses nor deletes it; delete or rename it, and the ApiDefinition gets its own`;
      await this.#setStatus(api, { ready: false, reason: 'ConfigMapNameTaken', message, fields });
      // The cache holds only the operator's ConfigMaps, so the other one's delete sets nothing
      // off: the resync, which reconciles every ApiDefinition each period, looks again.
      return;
    }
    await this.#setStatus(api, {
      ready: true,
      reason: 'Compiled',
      message: `compiled config in ConfigMap ${configMapName(name)} (${outcome.policyIds.length} granting policies)`,
      // Only what the gateways are given: a config that was not written leaves them as they were.
      fields: { ...fields, listen_path: outcome.listenPath, rate_limit: rateLimitColumn(outcome.apiLimit) },
    });
    return result;
  }

  /**
   * The ConfigMap in force of an ApiDefinition refused (or compiled with a refused granting
   * Policy): the one held, else the stored one if it is as the operator wrote it for this
   * ApiDefinition, then held. None when there is none to be had: it never compiled, or its
   * ConfigMap was deleted before this operator saw the refusal (one started since, say).
   */
  async #inForceConfigMap(api: Api): Promise<V1ConfigMap | undefined> {
    const { namespace, name } = api.metadata;
    const key = flatKey(namespace, name);
    const held = this.#inForce.get(key);
    if (held) return held;
    if (!this.#ctx.caches.configMaps.get(namespace, configMapName(name))) return undefined;
    const stored = await this.#ctx.configMaps.stored(namespace, configMapName(name));
    const written = stored && asWritten(stored, api);
    if (written) this.#inForce.set(key, written);
    return written;
  }

  /**
   * Says why the ApiDefinition is refused, and keeps it served as it is (docs/behaviour.md#bad-edits):
   * its ConfigMap in force, deleted or edited by hand since, is written back, with the Policies
   * granting it as they are now (a revoked grant must not stay in force behind a refused edit).
   * That ConfigMap is held before the status says so: one deleted as soon as the refusal shows
   * (by a user who saw it) would otherwise be gone before it was read, and never written back.
   */
  async #refuse(api: Api, status: DesiredStatus<ApiDefinitionStatus>, signal: AbortSignal): Promise<Result | void> {
    const inForce = await this.#inForceConfigMap(api);
    const held = inForce?.data?.[CONFIG_KEY];
    const config = (held === undefined ? undefined : this.#compiler.refusedApiConfig(held, this.#inputs, MAX_CONFIG_BYTES)) ?? held;
    if (!inForce || config === undefined) {
      // Nothing is served: no policy is in force on it, and it has no ConfigMap to name (left
      // undefined, so that a status an earlier version wrote with them loses them).
      await this.#setStatus(api, { ...status, fields: { api_id: status.fields.api_id, policies: undefined, configMap: undefined } });
      return;
    }
    const policies = Object.keys(policiesOfConfigMap(config));
    await this.#setStatus(api, { ...status, fields: { ...status.fields, policies } });
    signal.throwIfAborted();
    const body = config === held ? inForce : withHash(inForce, config);
    const result = await this.#writeConfigMap(api, body, () => config, policies.length, true);
    // Someone else's ConfigMap took the name: nothing to keep until it goes, and the status already says why the API is not Ready.
    return result === 'taken' ? undefined : result;
  }

  /**
   * Writes the compiled ConfigMap unless the cached one is up to date; `json` compiles its
   * config only when a write needs it. `keep`: what is written is the version in force of a
   * refused API or Policy (#inForce).
   */
  async #writeConfigMap(api: Api, desired: V1ConfigMap, json: () => string, policyCount: number, keep: boolean): Promise<Result | 'taken' | void> {
    const current = this.#ctx.caches.configMaps.get(api.metadata.namespace, configMapName(api.metadata.name));
    if (current && upToDate(current, desired)) return;
    const graceLeftMs = current ? this.#retainGraceLeftMs(api, current) : 0;
    if (graceLeftMs > 0) return { requeueAfterMs: graceLeftMs };
    const body = withConfig(desired, json());
    const action = await this.#ctx.configMaps.apply(body, current);
    // The cache lagged behind the stored ConfigMap (a retain mark, a hand edit): decide again on it.
    if (action === 'changed') return { requeueAfterMs: STALE_CACHE_RETRY_MS };
    if (action === 'taken') return action;
    if (keep) this.#inForce.set(flatKey(api.metadata.namespace, api.metadata.name), body);
    this.#ctx.metrics.configMapWrites.inc({ action });
    this.#ctx.log.info({ api: `${api.metadata.namespace}/${api.metadata.name}`, action }, 'compiled config written');
    this.#ctx.events.record(api, 'Normal', 'ConfigWritten', `compiled config ${action} in ConfigMap ${desired.metadata?.name} (${policyCount} granting policies)`);
  }

  /**
   * The admin DELETE marks the ConfigMap retained and then deletes the ApiDefinition: in
   * between, the ConfigMap must not be rewritten (that would drop the mark). If the
   * ApiDefinition is still there after a grace period (the delete failed, or the API was
   * re-created), the operator takes the ConfigMap back: this says how long to wait still. An
   * ApiDefinition other than the one whose delete retained it (another uid) was created since
   * that delete: it is taken back at once, so the new definition is served without the wait.
   */
  #retainGraceLeftMs(api: Api, current: V1ConfigMap): number {
    const key = flatKey(api.metadata.namespace, api.metadata.name);
    const annotations = current.metadata?.annotations ?? {};
    const retainedFor = annotations[RETAINED_FOR_UID_ANNOTATION];
    const recreated = retainedFor !== undefined && api.metadata.uid !== undefined && retainedFor !== api.metadata.uid;
    if (annotations[RETAIN_ANNOTATION] !== 'true' || recreated) {
      this.#retainedSince.delete(key);
      return 0;
    }
    const seen = this.#retainedSince.get(key);
    const since = seen !== undefined && seen.retainedFor === retainedFor ? seen.since : Date.now();
    this.#retainedSince.set(key, { since, retainedFor });
    const left = since + RETAIN_GRACE_MS - Date.now();
    if (left > 0) return left;
    this.#retainedSince.delete(key);
    return 0;
  }

  /**
   * The ApiDefinition is gone: delete its ConfigMap unless the admin DELETE asked to keep it
   * until a reload. The admin DELETE marks the ConfigMap just before it deletes the
   * ApiDefinition, and the two watches deliver in no fixed order, so the cached copy may not
   * show the mark yet: the delete is of the cached version only, and a newer one is decided
   * on again once the cache has it.
   */
  async #cleanUp(namespace: string, name: string): Promise<Result | void> {
    const cm = this.#ctx.caches.configMaps.get(namespace, configMapName(name));
    // The ApiDefinition is gone: a grace it had is over, whatever its ConfigMap is now.
    this.#retainedSince.delete(flatKey(namespace, name));
    if (!cm || cm.metadata?.labels?.[MANAGED_BY_LABEL] !== MANAGED_BY) return;
    if (cm.metadata.annotations?.[RETAIN_ANNOTATION] === 'true') return;
    const outcome = await this.#ctx.configMaps.delete(namespace, configMapName(name), cm.metadata.resourceVersion);
    if (outcome === 'changed') return { requeueAfterMs: STALE_CACHE_RETRY_MS };
    this.#ctx.metrics.configMapWrites.inc({ action: 'deleted' });
    this.#ctx.log.info({ api: `${namespace}/${name}` }, 'compiled config of a deleted ApiDefinition removed');
  }

  async #setStatus(api: Api, desired: DesiredStatus<ApiDefinitionStatus>): Promise<void> {
    await setStatus(this.#ctx, 'ApiDefinition', api, desired);
  }
}
