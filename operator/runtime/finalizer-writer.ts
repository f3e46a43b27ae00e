import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { kinds, type KindName } from '../../crds/kinds.ts';
import type { FinalizerWriter } from '../kit/controllerutil.ts';
import type { OwnWrites } from '../kit/own-writes.ts';
import type { GwObject } from './gw-object.ts';

/**
 * Finalizer lists through the API server. The patch carries the resourceVersion read, so
 * a concurrent change (another finalizer added, say) makes it fail with 409 and the
 * reconcile retries on fresh state instead of overwriting it.
 */
export class KubeFinalizerWriter implements FinalizerWriter {
  readonly #api: CustomObjectsApi;
  readonly #ownWrites: OwnWrites;

  constructor(kc: KubeConfig, ownWrites: OwnWrites) {
    this.#api = kc.makeApiClient(CustomObjectsApi);
    this.#ownWrites = ownWrites;
  }

  async set<K extends KindName>(kind: K, obj: GwObject<K>, finalizers: string[]): Promise<GwObject<K>> {
    const { group, version, plural } = kinds[kind];
    const { namespace, name, resourceVersion } = obj.metadata;
    const patched: GwObject<K> = await this.#api.patchNamespacedCustomObject(
      { group, version, plural, namespace, name, body: { metadata: { resourceVersion, finalizers } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    this.#ownWrites.record(kind, patched);
    return patched;
  }
}
