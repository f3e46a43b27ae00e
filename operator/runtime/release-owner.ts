import { ApiException, CoreV1Api, RbacAuthorizationV1Api, type KubeConfig, type V1OwnerReference } from '@kubernetes/client-node';

/**
 * The owner of what the operator creates in its own namespace (the leader Lease, the
 * webhook certificate Secret): the webhook Service the chart installs. The garbage collector
 * then removes them with the release on `helm uninstall`. Undefined when no owner is
 * configured (an operator run without the chart); the objects are then created without owner.
 * Throws ReleaseOwnerGoneError when the owner is configured but absent: the release is being
 * uninstalled, and an object created now without an owner would outlive it.
 */
export async function releaseOwner(kc: KubeConfig, namespace: string, serviceName: string | undefined): Promise<V1OwnerReference[] | undefined> {
  if (!serviceName) return undefined;
  const api = kc.makeApiClient(CoreV1Api);
  return ownerOf('v1', 'Service', serviceName, () => api.readNamespacedService({ name: serviceName, namespace }));
}

/**
 * The owner of the cluster-scoped webhook configuration: a ClusterRole of the release (a
 * namespaced object may not own a cluster-scoped one).
 */
export async function clusterReleaseOwner(kc: KubeConfig, clusterRoleName: string | undefined): Promise<V1OwnerReference[] | undefined> {
  if (!clusterRoleName) return undefined;
  const api = kc.makeApiClient(RbacAuthorizationV1Api);
  return ownerOf('rbac.authorization.k8s.io/v1', 'ClusterRole', clusterRoleName, () => api.readClusterRole({ name: clusterRoleName }));
}

/** The release's owner object is configured but gone: create nothing until it is back. */
export class ReleaseOwnerGoneError extends Error {
  constructor(kind: string, name: string) {
    super(`${kind} ${name}, the owner of what the operator creates, is gone (release uninstalled?); creating nothing`);
    this.name = 'ReleaseOwnerGoneError';
  }
}

async function ownerOf(apiVersion: string, kind: string, name: string, read: () => Promise<{ metadata?: { uid?: string } }>): Promise<V1OwnerReference[]> {
  try {
    const uid = (await read()).metadata?.uid;
    if (!uid) throw new ReleaseOwnerGoneError(kind, name);
    return [{ apiVersion, kind, name, uid }];
  } catch (error) {
    if (error instanceof ApiException && error.code === 404) throw new ReleaseOwnerGoneError(kind, name);
    throw error;
  }
}
