import type { V1ConfigMap } from '@kubernetes/client-node';
import {
  API_ID_LABEL,
  CONFIG_HASH_ANNOTATION,
  CONFIG_KEY,
  configHash,
  configMapName,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  RETAIN_ANNOTATION,
} from '../../common/compiled-config-map.ts';
import { labelValueFor } from '../../common/label-value.ts';
import { controllerReference, controllerUid } from '../kit/controllerutil.ts';
import type { GwObject } from '../runtime/gw-object.ts';

/**
 * What the cache keeps of a compiled ConfigMap's data: the hash of its config and how many
 * keys the data held. The config itself (kilobytes per API, and the compile step keeps its
 * own copy) leaves the operator's memory; a hand edit still changes the hash it is judged on.
 */
interface DataDigest {
  configHash: string | undefined;
  keys: number;
}

const cachedDigests = new WeakMap<V1ConfigMap, DataDigest>();

function digestOf(cm: V1ConfigMap): DataDigest {
  const cached = cachedDigests.get(cm);
  if (cached) return cached;
  const config = cm.data?.[CONFIG_KEY];
  return { configHash: config === undefined ? undefined : configHash(config), keys: Object.keys(cm.data ?? {}).length };
}

/** The informer's prune step for compiled ConfigMaps (operator/runtime/informer-set.ts): keeps the digest, drops the data. */
export function keepOnlyDataDigest(cm: V1ConfigMap): void {
  if (cm.data === undefined) return;
  cachedDigests.set(cm, digestOf(cm));
  // Not `delete`: that would turn the object into a hash table (see InformerSet's trim).
  cm.data = undefined;
}

/** ConfigMaps hold at most 1 MiB in etcd; leave room for metadata. */
export const MAX_CONFIG_BYTES = 900 * 1024;

/**
 * The compiled ConfigMap as it should be, but for its data: whether the stored one is up to
 * date is judged on the config's hash alone (upToDate), so the config itself is needed only
 * for a write (withConfig).
 */
export function desiredConfigMap(api: GwObject<'ApiDefinition'>, apiId: string, hash: string): V1ConfigMap {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: configMapName(api.metadata.name),
      namespace: api.metadata.namespace,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [API_ID_LABEL]: labelValueFor(apiId) },
      annotations: { [CONFIG_HASH_ANNOTATION]: hash },
      ownerReferences: [controllerReference(api)],
    },
  };
}

/** The ConfigMap to write: desiredConfigMap's, holding the compiled config whose hash it carries. */
export function withConfig(desired: V1ConfigMap, json: string): V1ConfigMap {
  return { ...desired, data: { [CONFIG_KEY]: json } };
}

/** The same ConfigMap holding `json` instead, with its hash: a refused API's in force, its Policies compiled again. */
export function withHash(cm: V1ConfigMap, json: string): V1ConfigMap {
  const metadata = cm.metadata ?? {};
  return { ...cm, metadata: { ...metadata, annotations: { ...metadata.annotations, [CONFIG_HASH_ANNOTATION]: configHash(json) } }, data: { [CONFIG_KEY]: json } };
}

/**
 * Whether the stored ConfigMap already is the desired one: same content (compared on the
 * hash of the data itself, so a hand edit that kept the annotation is still caught), labels,
 * hash annotation, owner, and no leftover retain mark.
 */
export function upToDate(current: V1ConfigMap, desired: V1ConfigMap): boolean {
  const meta = current.metadata ?? {};
  const want = desired.metadata ?? {};
  const annotations = meta.annotations ?? {};
  const labels = meta.labels ?? {};
  const held = digestOf(current);
  const checks = [
    held.configHash !== undefined && held.configHash === want.annotations?.[CONFIG_HASH_ANNOTATION],
    held.keys === 1,
    annotations[CONFIG_HASH_ANNOTATION] === want.annotations?.[CONFIG_HASH_ANNOTATION],
    annotations[RETAIN_ANNOTATION] === undefined,
    labels[MANAGED_BY_LABEL] === MANAGED_BY,
    labels[API_ID_LABEL] === want.labels?.[API_ID_LABEL],
    controllerUid(current) === controllerUid(desired),
  ];
  return checks.every(Boolean);
}

/**
 * A stored ConfigMap as the operator wrote it for `api`, ready to be written again: undefined
 * when it is not that (someone else's, another ApiDefinition's, edited by hand so its data no
 * longer has the hash it carries, or marked retained by the admin DELETE).
 */
export function asWritten(cm: V1ConfigMap, api: GwObject<'ApiDefinition'>): V1ConfigMap | undefined {
  const { name, namespace, labels, annotations, ownerReferences } = cm.metadata ?? {};
  const config = cm.data?.[CONFIG_KEY];
  const written =
    config !== undefined &&
    Object.keys(cm.data ?? {}).length === 1 &&
    annotations?.[CONFIG_HASH_ANNOTATION] === configHash(config) &&
    annotations[RETAIN_ANNOTATION] === undefined &&
    labels?.[MANAGED_BY_LABEL] === MANAGED_BY &&
    api.metadata.uid !== undefined &&
    controllerUid(cm) === api.metadata.uid;
  return written ? { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace, labels, annotations, ownerReferences }, data: { [CONFIG_KEY]: config } } : undefined;
}
