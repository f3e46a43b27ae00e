import { randomBytes } from 'node:crypto';
import { CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import { MANAGED_BY, MANAGED_BY_LABEL } from '../../common/compiled-config-map.ts';
import { keyHash } from '../../crds/key-hash.ts';
import { controllerReference, isConflict, isNotFound } from '../kit/controllerutil.ts';
import type { OwnWrites } from '../kit/own-writes.ts';
import type { GwObject } from '../runtime/gw-object.ts';

export const keySecretName = (keyName: string): string => `gw-key-${keyName}`;
export const KEY_DATA = 'key';
export const KEY_LABEL = 'gw.dev/key';

/** A new raw key: 32 random bytes, hex. It leaves this process only inside the Secret. */
export const generateRawKey = (): string => randomBytes(32).toString('hex');

/** Hashes of the raw keys of cached Secrets whose data the cache dropped (keepOnlyKeyHash). */
const cachedHashes = new WeakMap<V1Secret, string | undefined>();

/** The hash of the raw key a Secret holds, or undefined when it holds none. */
export function hashOfSecret(secret: V1Secret | undefined): string | undefined {
  if (secret === undefined) return undefined;
  if (cachedHashes.has(secret)) return cachedHashes.get(secret);
  const encoded = secret.data?.[KEY_DATA];
  if (!encoded) return undefined;
  const raw = Buffer.from(encoded, 'base64').toString('utf8');
  return raw === '' ? undefined : keyHash(raw);
}

/**
 * The informer cache keeps a Key's Secret without its data, remembering only the key's
 * hash: the raw keys of 10,000 Keys then never sit in the operator's memory, and the cache
 * is that much smaller. Nor does it keep what no controller reads of it: its owner reference
 * (the Key controller finds the Key by the Secret's label, and deletes the Secret by name)
 * and its creation time, about 0.2 KiB per Key. Secrets of other kinds are left as they are.
 */
export function keepOnlyKeyHash(secret: V1Secret): void {
  if (!secret.metadata?.labels?.[KEY_LABEL]) return;
  cachedHashes.set(secret, hashOfSecret(secret));
  // Not `delete`: that would turn the object into a hash table (see InformerSet's trim).
  secret.data = undefined;
  secret.metadata.ownerReferences = undefined;
  secret.metadata.creationTimestamp = undefined;
}

/** The Secret holding a Key's raw key (owned by the Key, so it goes with it), and that key's hash. */
export function keySecret(key: GwObject<'Key'>, raw: string): { secret: V1Secret; hash: string } {
  const secret: V1Secret = {
    metadata: {
      name: keySecretName(key.metadata.name),
      namespace: key.metadata.namespace,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [KEY_LABEL]: key.metadata.name },
      ownerReferences: [controllerReference(key)],
    },
    type: 'Opaque',
    data: { [KEY_DATA]: Buffer.from(raw).toString('base64') },
  };
  return { secret, hash: keyHash(raw) };
}

/** Secrets of kubectl-made Keys: created once, deleted with the Key. */
export interface KeySecretStore {
  /** Creates the Secret with a fresh raw key; if one appeared meanwhile, that one wins. Returns the key's hash. */
  create(key: GwObject<'Key'>): Promise<string>;
  /** Deletes it; one already gone counts as deleted. */
  delete(namespace: string, name: string): Promise<void>;
}

export class KubeKeySecrets implements KeySecretStore {
  readonly #api: CoreV1Api;
  readonly #ownWrites: OwnWrites;

  constructor(kc: KubeConfig, ownWrites: OwnWrites) {
    this.#api = kc.makeApiClient(CoreV1Api);
    this.#ownWrites = ownWrites;
  }

  async #read(namespace: string, name: string): Promise<V1Secret | undefined> {
    try {
      return await this.#api.readNamespacedSecret({ name, namespace });
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  async create(key: GwObject<'Key'>): Promise<string> {
    const { secret, hash } = keySecret(key, generateRawKey());
    try {
      this.#ownWrites.record('Secret', await this.#api.createNamespacedSecret({ namespace: key.metadata.namespace, body: secret }));
      return hash;
    } catch (error) {
      if (!isConflict(error)) throw error;
      const existing = await this.#read(key.metadata.namespace, keySecretName(key.metadata.name));
      const existingHash = hashOfSecret(existing);
      if (!existingHash) throw new Error(`Secret ${keySecretName(key.metadata.name)} exists without a "${KEY_DATA}" entry`, { cause: error });
      return existingHash;
    }
  }

  async delete(namespace: string, name: string): Promise<void> {
    try {
      await this.#api.deleteNamespacedSecret({ name, namespace });
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}
