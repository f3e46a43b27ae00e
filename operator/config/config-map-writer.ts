import { ApiException, CoreV1Api, type KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';

/** Create-or-replace and delete of compiled ConfigMaps; 404/409 races resolve as "someone got there first". */
export class ConfigMapWriter {
  readonly #api: CoreV1Api;

  constructor(kc: KubeConfig) {
    this.#api = kc.makeApiClient(CoreV1Api);
  }

  /** Writes the desired ConfigMap over whatever is stored (the operator owns every byte of it). */
  async apply(desired: V1ConfigMap, current: V1ConfigMap | undefined): Promise<'created' | 'updated'> {
    const name = desired.metadata?.name ?? '';
    const namespace = desired.metadata?.namespace ?? '';
    if (current) {
      // The cache may lag: write over the latest stored version rather than fail on a stale one.
      const body = { ...desired, metadata: { ...desired.metadata, resourceVersion: undefined } };
      try {
        await this.#api.replaceNamespacedConfigMap({ name, namespace, body });
        return 'updated';
      } catch (error) {
        if (!(error instanceof ApiException) || error.code !== 404) throw error;
      }
    }
    try {
      await this.#api.createNamespacedConfigMap({ namespace, body: desired });
      return 'created';
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409) throw error;
      await this.#api.replaceNamespacedConfigMap({ name, namespace, body: desired });
      return 'updated';
    }
  }

  async delete(namespace: string, name: string): Promise<void> {
    try {
      await this.#api.deleteNamespacedConfigMap({ name, namespace });
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 404) throw error;
    }
  }
}
