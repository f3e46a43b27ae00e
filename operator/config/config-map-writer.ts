import { CoreV1Api, type KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import { isConflict, isNotFound } from '../kit/controllerutil.ts';
import type { OwnWrites } from '../kit/own-writes.ts';

/** Writes and deletes compiled ConfigMaps. */
export interface ConfigMapWriter {
  /** Writes the desired ConfigMap over whatever is stored (the operator owns every byte of it). */
  apply(desired: V1ConfigMap, current: V1ConfigMap | undefined): Promise<'created' | 'updated'>;
  /**
   * Deletes the version the caller read (`resourceVersion`): 'changed' when the stored one
   * has moved on since (the caller's cache lagged), so the caller decides again on the new
   * version. One already gone counts as deleted.
   */
  delete(namespace: string, name: string, resourceVersion: string | undefined): Promise<'deleted' | 'changed'>;
}

/** Create-or-replace and delete through the API server; 404/409 races resolve as "someone got there first". */
export class KubeConfigMapWriter implements ConfigMapWriter {
  readonly #api: CoreV1Api;
  readonly #ownWrites: OwnWrites;

  constructor(kc: KubeConfig, ownWrites: OwnWrites) {
    this.#api = kc.makeApiClient(CoreV1Api);
    this.#ownWrites = ownWrites;
  }

  async apply(desired: V1ConfigMap, current: V1ConfigMap | undefined): Promise<'created' | 'updated'> {
    const name = desired.metadata?.name ?? '';
    const namespace = desired.metadata?.namespace ?? '';
    if (current) {
      // The cache may lag: write over the latest stored version rather than fail on a stale one.
      const body = { ...desired, metadata: { ...desired.metadata, resourceVersion: undefined } };
      try {
        this.#ownWrites.record('ConfigMap', await this.#api.replaceNamespacedConfigMap({ name, namespace, body }));
        return 'updated';
      } catch (error) {
        if (!isNotFound(error)) throw error;
      }
    }
    try {
      this.#ownWrites.record('ConfigMap', await this.#api.createNamespacedConfigMap({ namespace, body: desired }));
      return 'created';
    } catch (error) {
      if (!isConflict(error)) throw error;
      this.#ownWrites.record('ConfigMap', await this.#api.replaceNamespacedConfigMap({ name, namespace, body: desired }));
      return 'updated';
    }
  }

  async delete(namespace: string, name: string, resourceVersion: string | undefined): Promise<'deleted' | 'changed'> {
    try {
      await this.#api.deleteNamespacedConfigMap({ name, namespace, body: { preconditions: { resourceVersion } } });
    } catch (error) {
      if (isConflict(error)) return 'changed';
      if (!isNotFound(error)) throw error;
    }
    return 'deleted';
  }
}
