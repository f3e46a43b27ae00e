import { randomBytes } from 'node:crypto';
import { ApiException, CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import { MANAGED_BY, MANAGED_BY_LABEL } from '../../common/compiled-config-map.ts';
import { keyHash } from '../../crds/key-hash.ts';
import { ownerReference } from '../config/config-map.ts';
import type { GwObject } from '../runtime/gw-object.ts';

export const keySecretName = (keyName: string): string => `gw-key-${keyName}`;
export const KEY_DATA = 'key';
export const KEY_LABEL = 'gw.dev/key';

/** A new raw key: 32 random bytes, hex. It leaves this process only inside the Secret. */
export const generateRawKey = (): string => randomBytes(32).toString('hex');

/** The hash of the raw key a Secret holds, or undefined when it holds none. */
export function hashOfSecret(secret: V1Secret | undefined): string | undefined {
  const encoded = secret?.data?.[KEY_DATA];
  if (!encoded) return undefined;
  const raw = Buffer.from(encoded, 'base64').toString('utf8');
  return raw === '' ? undefined : keyHash(raw);
}

/** Secrets of kubectl-made Keys: read past a lagging cache, created once, deleted with the Key. */
export class KeySecrets {
  readonly #api: CoreV1Api;

  constructor(kc: KubeConfig) {
    this.#api = kc.makeApiClient(CoreV1Api);
  }

  async read(namespace: string, name: string): Promise<V1Secret | undefined> {
    try {
      return await this.#api.readNamespacedSecret({ name, namespace });
    } catch (error) {
      if (error instanceof ApiException && error.code === 404) return undefined;
      throw error;
    }
  }

  /** Creates the Secret with a fresh raw key; if one appeared meanwhile, that one wins. Returns the key's hash. */
  async create(key: GwObject<'Key'>): Promise<string> {
    const raw = generateRawKey();
    const body: V1Secret = {
      metadata: {
        name: keySecretName(key.metadata.name),
        namespace: key.metadata.namespace,
        labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [KEY_LABEL]: key.metadata.name },
        ownerReferences: [ownerReference(key)],
      },
      type: 'Opaque',
      data: { [KEY_DATA]: Buffer.from(raw).toString('base64') },
    };
    try {
      await this.#api.createNamespacedSecret({ namespace: key.metadata.namespace, body });
      return keyHash(raw);
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409) throw error;
      const existing = await this.read(key.metadata.namespace, keySecretName(key.metadata.name));
      const hash = hashOfSecret(existing);
      if (!hash) throw new Error(`Secret ${keySecretName(key.metadata.name)} exists without a "${KEY_DATA}" entry`, { cause: error });
      return hash;
    }
  }

  async delete(namespace: string, name: string): Promise<void> {
    try {
      await this.#api.deleteNamespacedSecret({ name, namespace });
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 404) throw error;
    }
  }
}
