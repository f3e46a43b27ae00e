import type { V1ConfigMap } from '@kubernetes/client-node';
import { kinds } from '../../crds/kinds.ts';
import type { ApiDefinitionStatus } from '../../crds/schemas/api-definition.ts';
import { ApiCompiler } from '../config/compile-api.ts';
import { ConfigMapWriter } from '../config/config-map-writer.ts';
import { configMapName, MANAGED_BY, MANAGED_BY_LABEL, RETAIN_ANNOTATION } from '../../common/compiled-config-map.ts';
import { desiredConfigMap, MAX_CONFIG_BYTES, upToDate } from '../config/config-map.ts';
import { splitKey, type GwObject } from '../runtime/gw-object.ts';

type Api = GwObject<'ApiDefinition'>;
import { nextStatus, type DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

const RETAIN_GRACE_MS = 15_000;

/**
 * ApiDefinition → its compiled ConfigMap `gw-api-<name>` (the API, every policy granting
 * it, the gateway settings), rewritten only when the content changes, plus status.
 * A compile problem or an oversized config leaves the last written ConfigMap in place
 * (sidecars keep serving the last good config) and says why on the status.
 */
export class ApiDefinitionController {
  readonly kind = kinds.ApiDefinition.kind;
  readonly #ctx: ControllerContext;
  readonly #writer: ConfigMapWriter;
  readonly #compiler: ApiCompiler;
  /** When each retained ConfigMap was first seen retained while its ApiDefinition still existed. */
  readonly #retainedSince = new Map<string, number>();

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    this.#writer = new ConfigMapWriter(ctx.kc);
    this.#compiler = new ApiCompiler(ctx.settings);
  }

  async reconcile(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    const api = this.#ctx.caches.apis.get(namespace, name);
    if (!api || api.metadata.deletionTimestamp) {
      this.#compiler.forget(namespace, name);
      await this.#cleanUp(namespace, name);
      return;
    }
    const outcome = this.#compiler.compile(api, this.#ctx.caches.apis.list(), this.#ctx.caches.policies.list());
    if (!outcome.ok) {
      await this.#setStatus(api, { ready: false, reason: outcome.reason, message: outcome.message, fields: { api_id: outcome.apiId } });
      return;
    }
    const { json } = outcome;
    const fields = { api_id: outcome.apiId, policies: outcome.policyIds, configMap: configMapName(name) };
    const bytes = Buffer.byteLength(json);
    if (bytes > MAX_CONFIG_BYTES) {
      const message = `compiled config is ${bytes} bytes, over the ${MAX_CONFIG_BYTES}-byte limit of one ConfigMap; split the policies granting this API or reduce its endpoints`;
      await this.#setStatus(api, { ready: false, reason: 'ConfigTooLarge', message, fields });
      return;
    }
    await this.#writeConfigMap(api, outcome.apiId, json, outcome.policyIds.length);
    await this.#setStatus(api, {
      ready: true,
      reason: 'Compiled',
      message: `compiled config in ConfigMap ${configMapName(name)} (${outcome.policyIds.length} granting policies)`,
      fields,
    });
  }

  async #writeConfigMap(api: Api, apiId: string, json: string, policyCount: number): Promise<void> {
    const desired = desiredConfigMap(api, apiId, json);
    const current = this.#ctx.caches.configMaps.get(api.metadata.namespace, configMapName(api.metadata.name));
    if (current && upToDate(current, desired)) return;
    if (current && this.#inRetainGrace(api, current)) return;
    const action = await this.#writer.apply(desired, current);
    this.#ctx.metrics.configMapWrites.inc({ action });
    this.#ctx.log.info({ api: `${api.metadata.namespace}/${api.metadata.name}`, action }, 'compiled config written');
    await this.#ctx.events.record(api, 'Normal', 'ConfigWritten', `compiled config ${action} in ConfigMap ${desired.metadata?.name} (${policyCount} granting policies)`);
  }

  /**
   * The admin DELETE marks the ConfigMap retained and then deletes the ApiDefinition: in
   * between, the ConfigMap must not be rewritten (that would drop the mark). If the
   * ApiDefinition is still there after a grace period (the delete failed, or the API was
   * re-created), the operator takes the ConfigMap back at the next reconcile (resync).
   */
  #inRetainGrace(api: Api, current: V1ConfigMap): boolean {
    const key = `${api.metadata.namespace}/${api.metadata.name}`;
    if (current.metadata?.annotations?.[RETAIN_ANNOTATION] !== 'true') {
      this.#retainedSince.delete(key);
      return false;
    }
    const since = this.#retainedSince.get(key) ?? Date.now();
    this.#retainedSince.set(key, since);
    if (Date.now() - since < RETAIN_GRACE_MS) return true;
    this.#retainedSince.delete(key);
    return false;
  }

  /** The ApiDefinition is gone: delete its ConfigMap unless the admin DELETE asked to keep it until a reload. */
  async #cleanUp(namespace: string, name: string): Promise<void> {
    const cm = this.#ctx.caches.configMaps.get(namespace, configMapName(name));
    if (!cm || cm.metadata?.labels?.[MANAGED_BY_LABEL] !== MANAGED_BY) return;
    if (cm.metadata.annotations?.[RETAIN_ANNOTATION] === 'true') return;
    this.#retainedSince.delete(`${namespace}/${name}`);
    await this.#writer.delete(namespace, configMapName(name));
    this.#ctx.metrics.configMapWrites.inc({ action: 'deleted' });
    this.#ctx.log.info({ api: `${namespace}/${name}` }, 'compiled config of a deleted ApiDefinition removed');
  }

  async #setStatus(api: Api, desired: DesiredStatus<ApiDefinitionStatus>): Promise<void> {
    const status = nextStatus(api, desired);
    if (!status) return;
    await this.#ctx.status.write('ApiDefinition', api, status);
    if (!desired.ready) await this.#ctx.events.record(api, 'Warning', desired.reason, desired.message);
  }
}
