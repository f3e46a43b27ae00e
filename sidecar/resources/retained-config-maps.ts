import { ApiException, type ConfigurationOptions, type CoreV1Api, PatchStrategy, setHeaderOptions, type V1ConfigMap, type V1OwnerReference } from '@kubernetes/client-node';
import {
  API_ID_LABEL,
  apiNameOf,
  compiledApiId,
  CONFIG_KEY,
  configMapName,
  MANAGED_BY_SELECTOR,
  RETAIN_ANNOTATION,
  RETAINED_FOR_UID_ANNOTATION,
} from '../../common/compiled-config-map.ts';

/**
 * The admin-DELETE side of the ConfigMap convention shared with the operator: before an
 * ApiDefinition is deleted, its compiled ConfigMap `gw-api-<name>` is marked
 * `gw.dev/retain-until-reload: "true"` and loses its ownerReferences, so neither the
 * operator nor the garbage collector removes it and every sidecar keeps serving the API
 * (docs/behaviour.md#api-states). A reload deletes the retained ConfigMaps whose ApiDefinition is gone.
 */

/** A merge patch, with the calls' other options (an operation's deadline: sidecar/resources/kube-deadline.ts). */
const mergePatch = (options: ConfigurationOptions): ConfigurationOptions => setHeaderOptions('Content-Type', PatchStrategy.MergePatch, options);

export const isNotFound = (error: unknown): boolean => error instanceof ApiException && error.code === 404;

/** What retain() changed, so a failed delete can put it back. */
export interface RetainedConfigMap {
  namespace: string;
  name: string;
  ownerReferences: V1OwnerReference[] | undefined;
}

/** null: the operator has not written the ConfigMap yet, so there is nothing to keep. */
export async function retain(core: CoreV1Api, namespace: string, apiName: string, options: ConfigurationOptions = {}): Promise<RetainedConfigMap | null> {
  const name = configMapName(apiName);
  let ownerReferences: V1OwnerReference[] | undefined;
  try {
    ownerReferences = (await core.readNamespacedConfigMap({ namespace, name }, options)).metadata?.ownerReferences;
  } catch (error) {
    if (isNotFound(error)) return null;
    throw error;
  }
  const owner = ownerReferences?.find((ref) => ref.controller)?.uid ?? null;
  const body = { metadata: { annotations: { [RETAIN_ANNOTATION]: 'true', [RETAINED_FOR_UID_ANNOTATION]: owner }, ownerReferences: null } };
  await core.patchNamespacedConfigMap({ namespace, name, body }, mergePatch(options));
  return { namespace, name, ownerReferences };
}

export async function unretain(core: CoreV1Api, retained: RetainedConfigMap, options: ConfigurationOptions = {}): Promise<void> {
  const body = { metadata: { annotations: { [RETAIN_ANNOTATION]: null, [RETAINED_FOR_UID_ANNOTATION]: null }, ownerReferences: retained.ownerReferences ?? null } };
  await core.patchNamespacedConfigMap({ namespace: retained.namespace, name: retained.name, body }, mergePatch(options));
}

/** The api_id its config names (a label holds only a hash of a long one), else its label, else its name. */
const apiIdOf = (configMap: V1ConfigMap): string =>
  compiledApiId(configMap.data?.[CONFIG_KEY]) ?? configMap.metadata?.labels?.[API_ID_LABEL] ?? configMap.metadata?.name ?? '';

/**
 * Deletes the retained ConfigMaps (in the given namespaces, or all) whose ApiDefinition
 * no longer exists; `apiExists` answers for (namespace, ApiDefinition name). Returns the
 * api ids it released.
 */
export async function releaseRetained(
  core: CoreV1Api,
  namespaces: readonly string[],
  apiExists: (namespace: string, apiName: string) => Promise<boolean>,
  options: ConfigurationOptions = {},
): Promise<string[]> {
  const lists = await Promise.all(
    namespaces.length === 0
      ? [core.listConfigMapForAllNamespaces({ labelSelector: MANAGED_BY_SELECTOR }, options)]
      : namespaces.map((namespace) => core.listNamespacedConfigMap({ namespace, labelSelector: MANAGED_BY_SELECTOR }, options)),
  );
  const released: string[] = [];
  for (const configMap of lists.flatMap((list) => list.items)) {
    const { name = '', namespace = '', annotations } = configMap.metadata ?? {};
    const apiName = apiNameOf(name);
    if (annotations?.[RETAIN_ANNOTATION] !== 'true' || apiName === undefined) continue;
    if (await apiExists(namespace, apiName)) continue;
    try {
      await core.deleteNamespacedConfigMap({ namespace, name }, options);
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    released.push(apiIdOf(configMap));
  }
  return released;
}
