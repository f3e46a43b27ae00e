import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { kinds } from '../../crds/kinds.ts';
import type { GwObject } from '../runtime/gw-object.ts';

/** Cleanup outside the API server: the Redis session of a deleted Key. */
export const KEY_FINALIZER = 'gw.dev/key-session';

export const hasFinalizer = (obj: GwObject<'Key'>): boolean => (obj.metadata.finalizers ?? []).includes(KEY_FINALIZER);

/**
 * Sets a Key's finalizer list. The patch carries the resourceVersion read, so a
 * concurrent change (another finalizer added, say) makes it fail with 409 and the
 * reconcile retries on fresh state instead of overwriting it.
 */
export async function setKeyFinalizers(kc: KubeConfig, key: GwObject<'Key'>, finalizers: string[]): Promise<GwObject<'Key'>> {
  const api = kc.makeApiClient(CustomObjectsApi);
  const { group, version, plural } = kinds.Key;
  return (await api.patchNamespacedCustomObject(
    {
      group,
      version,
      plural,
      namespace: key.metadata.namespace,
      name: key.metadata.name,
      body: { metadata: { resourceVersion: key.metadata.resourceVersion, finalizers } },
    },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  )) as GwObject<'Key'>;
}
