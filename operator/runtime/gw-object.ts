import type { KubernetesObject } from '@kubernetes/client-node';

/** A gw custom resource as the informer cache holds it: spec and status not yet parsed. */
export interface GwObject extends KubernetesObject {
  metadata: KubernetesObject['metadata'] & { name: string; namespace: string };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

/** The work-queue key of a namespaced object. */
export const objectKey = (namespace: string, name: string): string => `${namespace}/${name}`;

export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/');
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
