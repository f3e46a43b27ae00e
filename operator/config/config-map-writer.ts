import { CoreV1Api, type KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import { MANAGED_BY, MANAGED_BY_LABEL } from '../../common/compiled-config-map.ts';
import { controllerUid, isConflict, isNotFound } from '../kit/controllerutil.ts';
import type { OwnWrites } from '../kit/own-writes.ts';

/** Writes and deletes compiled ConfigMaps. */
export interface ConfigMapWriter {
  /**
   * Writes the desired ConfigMap over the version the caller read (`current`, or none): 'changed'
   * when the stored one is not that version any more (the caller's cache lagged: another
   * writer, such as the admin DELETE's retain mark, got there first), so the caller decides
   * again on the newer version rather than write over what it has not seen. 'taken' when a
   * ConfigMap of that name is someone else's (made by hand: not the operator's label, and no
   * owner reference to the ApiDefinition), which is left as it is.
   */
  apply(desired: V1ConfigMap, current: V1ConfigMap | undefined): Promise<'created' | 'updated' | 'changed' | 'taken'>;
  /**
   * Deletes the version the caller read (`resourceVersion`): 'changed' when the stored one
   * has moved on since (the caller's cache lagged), so the caller decides again on the new
   * version. One already gone counts as deleted.
   */
  delete(namespace: string, name: string, resourceVersion: string | undefined): Promise<'deleted' | 'changed'>;
  /**
   * A ConfigMap as stored, with its data (the informer's cache keeps only a digest of it);
   * undefined when there is none. Read only to keep the version in force of a resource the
   * compile step refuses.
   */
  stored(namespace: string, name: string): Promise<V1ConfigMap | undefined>;
}

/** Create, replace and delete through the API server, each on the version the caller read; 404/409 say the stored one moved on. */
export class KubeConfigMapWriter implements ConfigMapWriter {
  readonly #api: CoreV1Api;
  readonly #ownWrites: OwnWrites;

  constructor(kc: KubeConfig, ownWrites: OwnWrites) {
    this.#api = kc.makeApiClient(CoreV1Api);
    this.#ownWrites = ownWrites;
  }

  async apply(desired: V1ConfigMap, current: V1ConfigMap | undefined): Promise<'created' | 'updated' | 'changed' | 'taken'> {
    const namespace = desired.metadata?.namespace ?? '';
    try {
      if (current) return await this.#replace(desired, current);
      this.#ownWrites.record('ConfigMap', await this.#api.createNamespacedConfigMap({ namespace, body: desired }));
      return 'created';
    } catch (error) {
      if (isConflict(error) && !current) return this.#nameTakenBy(desired);
      if (isConflict(error) || isNotFound(error)) return 'changed';
      throw error;
    }
  }

  /** The version read is the precondition: a stale one answers 409 Conflict, and 404 when gone. */
  async #replace(desired: V1ConfigMap, current: V1ConfigMap): Promise<'updated'> {
    const name = desired.metadata?.name ?? '';
    const namespace = desired.metadata?.namespace ?? '';
    const body = { ...desired, metadata: { ...desired.metadata, resourceVersion: current.metadata?.resourceVersion } };
    this.#ownWrites.record('ConfigMap', await this.#api.replaceNamespacedConfigMap({ name, namespace, body }));
    return 'updated';
  }

  /**
   * A create found the name in use by a ConfigMap the cache does not hold. The cache holds
   * every ConfigMap with the operator's label, so one with it is a cache behind the store
   * ('changed'); one without it is the ApiDefinition's own with its label removed by hand,
   * taken back, or else someone else's ('taken').
   */
  async #nameTakenBy(desired: V1ConfigMap): Promise<'updated' | 'changed' | 'taken'> {
    const existing = await this.#read(desired.metadata?.namespace ?? '', desired.metadata?.name ?? '');
    if (existing === undefined || existing.metadata?.labels?.[MANAGED_BY_LABEL] === MANAGED_BY) return 'changed';
    const owner = controllerUid(desired);
    if (owner === undefined || controllerUid(existing) !== owner) return 'taken';
    try {
      return await this.#replace(desired, existing);
    } catch (error) {
      if (isConflict(error) || isNotFound(error)) return 'changed';
      throw error;
    }
  }

  async #read(namespace: string, name: string): Promise<V1ConfigMap | undefined> {
    try {
      return await this.#api.readNamespacedConfigMap({ name, namespace });
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  stored(namespace: string, name: string): Promise<V1ConfigMap | undefined> {
    return this.#read(namespace, name);
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
