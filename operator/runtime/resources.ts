import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import type { KindInfo } from '../../crds/kinds.ts';

/** How the operator lists and watches one kind, cluster-wide or in one namespace. */
export interface ResourceType {
  kind: string;
  /** Path of the collection: `namespace` undefined = all namespaces. */
  path(namespace?: string): string;
  list(namespace: string | undefined, labelSelector?: string): Promise<KubernetesListObject<KubernetesObject>>;
}

export function customResourceType(kc: KubeConfig, info: KindInfo): ResourceType {
  const api = kc.makeApiClient(CustomObjectsApi);
  const { group, version, plural } = info;
  const base = `/apis/${group}/${version}`;
  return {
    kind: info.kind,
    path: (namespace) => (namespace ? `${base}/namespaces/${namespace}/${plural}` : `${base}/${plural}`),
    list: async (namespace, labelSelector) =>
      (namespace
        ? await api.listNamespacedCustomObject({ group, version, namespace, plural, labelSelector })
        : await api.listClusterCustomObject({ group, version, plural, labelSelector })) as KubernetesListObject<KubernetesObject>,
  };
}

export function configMapType(kc: KubeConfig): ResourceType {
  const api = kc.makeApiClient(CoreV1Api);
  return {
    kind: 'ConfigMap',
    path: (namespace) => (namespace ? `/api/v1/namespaces/${namespace}/configmaps` : '/api/v1/configmaps'),
    list: async (namespace, labelSelector) =>
      namespace
        ? await api.listNamespacedConfigMap({ namespace, labelSelector })
        : await api.listConfigMapForAllNamespaces({ labelSelector }),
  };
}

export function secretType(kc: KubeConfig): ResourceType {
  const api = kc.makeApiClient(CoreV1Api);
  return {
    kind: 'Secret',
    path: (namespace) => (namespace ? `/api/v1/namespaces/${namespace}/secrets` : '/api/v1/secrets'),
    list: async (namespace, labelSelector) =>
      namespace
        ? await api.listNamespacedSecret({ namespace, labelSelector })
        : await api.listSecretForAllNamespaces({ labelSelector }),
  };
}
