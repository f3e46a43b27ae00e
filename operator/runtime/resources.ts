import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import type { KindInfo } from '../../crds/kinds.ts';

/** One page of a list: at most `limit` objects, from where the `continue` token of the page before left off. */
export interface ListPage {
  labelSelector?: string;
  limit: number;
  continue?: string;
}

/**
 * What one page of a list holds. The token that continues it comes back as `continue` in a
 * custom resource's list (plain JSON) and as `_continue` in a typed core list (the client's
 * models rename it); each ResourceType reads its own, so callers never see the difference.
 */
export interface ListedPage {
  items: KubernetesObject[];
  /** Every page of one list carries the version of its first page. */
  resourceVersion?: string;
  /** Absent on the last page. */
  continue?: string;
}

/** How the operator lists and watches one kind, cluster-wide or in one namespace. */
export interface ResourceType {
  kind: string;
  /** Path of the collection: `namespace` undefined = all namespaces. */
  path(namespace?: string): string;
  list(namespace: string | undefined, page: ListPage): Promise<ListedPage>;
}

/** A custom resource's list as the API server sends it: CustomObjectsApi returns the JSON as is. */
interface CustomObjectList {
  items: KubernetesObject[];
  metadata?: { resourceVersion?: string; continue?: string };
}

/** The page of a typed core list (V1ConfigMapList, V1SecretList). */
function corePage(list: KubernetesListObject<KubernetesObject>): ListedPage {
  return { items: list.items, resourceVersion: list.metadata?.resourceVersion, continue: list.metadata?._continue || undefined };
}

export function customResourceType(kc: KubeConfig, info: KindInfo): ResourceType {
  const api = kc.makeApiClient(CustomObjectsApi);
  const { group, version, plural } = info;
  const base = `/apis/${group}/${version}`;
  return {
    kind: info.kind,
    path: (namespace) => (namespace ? `${base}/namespaces/${namespace}/${plural}` : `${base}/${plural}`),
    list: async (namespace, { labelSelector, limit, continue: _continue }) => {
      const list = (namespace
        ? await api.listNamespacedCustomObject({ group, version, namespace, plural, labelSelector, limit, _continue })
        : await api.listClusterCustomObject({ group, version, plural, labelSelector, limit, _continue })) as CustomObjectList;
      return { items: list.items, resourceVersion: list.metadata?.resourceVersion, continue: list.metadata?.continue || undefined };
    },
  };
}

export function configMapType(kc: KubeConfig): ResourceType {
  const api = kc.makeApiClient(CoreV1Api);
  return {
    kind: 'ConfigMap',
    path: (namespace) => (namespace ? `/api/v1/namespaces/${namespace}/configmaps` : '/api/v1/configmaps'),
    list: async (namespace, { labelSelector, limit, continue: _continue }) =>
      corePage(
        namespace
          ? await api.listNamespacedConfigMap({ namespace, labelSelector, limit, _continue })
          : await api.listConfigMapForAllNamespaces({ labelSelector, limit, _continue }),
      ),
  };
}

export function secretType(kc: KubeConfig): ResourceType {
  const api = kc.makeApiClient(CoreV1Api);
  return {
    kind: 'Secret',
    path: (namespace) => (namespace ? `/api/v1/namespaces/${namespace}/secrets` : '/api/v1/secrets'),
    list: async (namespace, { labelSelector, limit, continue: _continue }) =>
      corePage(
        namespace
          ? await api.listNamespacedSecret({ namespace, labelSelector, limit, _continue })
          : await api.listSecretForAllNamespaces({ labelSelector, limit, _continue }),
      ),
  };
}
