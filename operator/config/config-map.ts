import { createHash } from 'node:crypto';
import type { V1ConfigMap, V1OwnerReference } from '@kubernetes/client-node';
import type { GwObject } from '../runtime/gw-object.ts';

export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'gw-operator';
export const API_ID_LABEL = 'gw.dev/api-id';
export const CONFIG_HASH_ANNOTATION = 'gw.dev/config-hash';
export const RETAIN_ANNOTATION = 'gw.dev/retain-until-reload';
export const CONFIG_KEY = 'config.json';
/** ConfigMaps hold at most 1 MiB in etcd; leave room for metadata. */
export const MAX_CONFIG_BYTES = 900 * 1024;

export const configMapName = (apiName: string): string => `gw-api-${apiName}`;

/** ConfigMap name `gw-api-<name>` → the ApiDefinition's name, or undefined for other ConfigMaps. */
export function apiNameOf(configMapName: string): string | undefined {
  return configMapName.startsWith('gw-api-') ? configMapName.slice('gw-api-'.length) : undefined;
}

export const configHash = (json: string): string => createHash('sha256').update(json).digest('hex');

/** Label values are at most 63 characters of [A-Za-z0-9._-]; longer or other ids are hashed into one. */
export function apiIdLabel(apiId: string): string {
  return /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/.test(apiId) ? apiId : `h-${configHash(apiId).slice(0, 40)}`;
}

export function ownerReference(obj: GwObject): V1OwnerReference {
  return {
    apiVersion: obj.apiVersion ?? 'gw.dev/v1alpha1',
    kind: obj.kind ?? 'ApiDefinition',
    name: obj.metadata.name,
    uid: obj.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: false,
  };
}

export function desiredConfigMap(api: GwObject, apiId: string, json: string): V1ConfigMap {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: configMapName(api.metadata.name),
      namespace: api.metadata.namespace,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [API_ID_LABEL]: apiIdLabel(apiId) },
      annotations: { [CONFIG_HASH_ANNOTATION]: configHash(json) },
      ownerReferences: [ownerReference(api)],
    },
    data: { [CONFIG_KEY]: json },
  };
}

/**
 * Whether the stored ConfigMap already is the desired one: same content (compared on the
 * data itself, so a hand edit that kept the annotation is still caught), labels, hash
 * annotation, owner, and no leftover retain mark.
 */
export function upToDate(current: V1ConfigMap, desired: V1ConfigMap): boolean {
  const meta = current.metadata ?? {};
  const want = desired.metadata ?? {};
  const annotations = meta.annotations ?? {};
  const labels = meta.labels ?? {};
  const owner = (meta.ownerReferences ?? []).find((ref) => ref.controller);
  const checks = [
    current.data?.[CONFIG_KEY] === desired.data?.[CONFIG_KEY],
    Object.keys(current.data ?? {}).length === 1,
    annotations[CONFIG_HASH_ANNOTATION] === want.annotations?.[CONFIG_HASH_ANNOTATION],
    annotations[RETAIN_ANNOTATION] === undefined,
    labels[MANAGED_BY_LABEL] === MANAGED_BY,
    labels[API_ID_LABEL] === want.labels?.[API_ID_LABEL],
    owner?.uid === want.ownerReferences?.[0]?.uid,
  ];
  return checks.every(Boolean);
}
