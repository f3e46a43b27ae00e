import { randomBytes } from 'node:crypto';
import { CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import { MANAGED_BY, MANAGED_BY_LABEL } from '../../common/compiled-config-map.ts';
import { labelValueFor } from '../../common/label-value.ts';
import { keyHash } from '../../crds/key-hash.ts';
import { controllerReference, isConflict, isNotFound } from '../kit/controllerutil.ts';
import type { OwnWrites } from '../kit/own-writes.ts';
import type { GwObject } from '../runtime/gw-object.ts';

const SECRET_PREFIX = 'gw-key-';
export const keySecretName = (keyName: string): string => `${SECRET_PREFIX}${keyName}`;
/** The Key a Secret of the operator's holds the raw key of: its label holds only a hash of a name too long for a label value. */
export const keyNameOfSecret = (secretName: string): string | undefined => (secretName.startsWith(SECRET_PREFIX) ? secretName.slice(SECRET_PREFIX.length) : undefined);
export const KEY_DATA = 'key';
export const KEY_LABEL = 'gw.dev/key';

/** A new raw key: 32 random bytes, hex. It leaves this process only inside the Secret. */
export const generateRawKey = (): string => randomBytes(32).toString('hex');

/** Hashes of the raw keys of cached Secrets whose data the cache dropped (keepOnlyKeyHash). */
const cachedHashes = new WeakMap<V1Secret, string | undefined>();

/**
 * The hash of the raw key a Secret holds, or undefined when it holds none a client could send:
 * an HTTP header value loses its leading and trailing whitespace, so a key with some (the
 * newline of `echo KEY | base64`) would be stored under a hash no request can match.
 */
export function hashOfSecret(secret: V1Secret | undefined): string | undefined {
  if (secret === undefined) return undefined;
  if (cachedHashes.has(secret)) return cachedHashes.get(secret);
  const encoded = secret.data?.[KEY_DATA];
  if (!encoded) return undefined;
  const raw = Buffer.from(encoded, 'base64').toString('utf8');
  return raw === '' || raw.trim() !== raw ? undefined : keyHash(raw);
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
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [KEY_LABEL]: labelValueFor(key.metadata.name) },
      ownerReferences: [controllerReference(key)],
    },
    type: 'Opaque',
    data: { [KEY_DATA]: Buffer.from(raw).toString('base64') },
  };
  return { secret, hash: keyHash(raw) };
}

/**
 * The Secret a Key's raw key goes in exists and is not that Key's: made by someone else (no
 * owner reference to the Key), it is neither taken over nor, later, deleted with the Key.
 */
export class SecretNameTakenError extends Error {
  override readonly name = 'SecretNameTakenError';
}

/** Whether `key` is the controller of `secret`: the operator made it for that Key (keySecret). */
export const ownedBy = (secret: V1Secret, key: GwObject<'Key'>): boolean =>
  (secret.metadata?.ownerReferences ?? []).some((ref) => ref.controller === true && ref.kind === 'Key' && ref.uid === key.metadata.uid);

/** Secrets of kubectl-made Keys: created once, deleted with the Key; a Secret the Key does not own is left alone. */
export interface KeySecretStore {
  /**
   * Creates the Secret with a fresh raw key; if the Key's own appeared meanwhile, that one
   * wins. Returns the key's hash (undefined: the Key's Secret holds none); throws
   * SecretNameTakenError when a Secret of that name is not the Key's.
   */
  create(key: GwObject<'Key'>): Promise<string | undefined>;
  /** Deletes the Key's Secret if the Key owns it; one already gone counts as deleted. */
  delete(key: GwObject<'Key'>): Promise<void>;
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

  async create(key: GwObject<'Key'>): Promise<string | undefined> {
    const { secret, hash } = keySecret(key, generateRawKey());
    try {
      this.#ownWrites.record('Secret', await this.#api.createNamespacedSecret({ namespace: key.metadata.namespace, body: secret }));
      return hash;
    } catch (error) {
      if (!isConflict(error)) throw error;
      const name = keySecretName(key.metadata.name);
      const existing = await this.#read(key.metadata.namespace, name);
      // Gone again since the conflict: the next reconcile creates it.
      if (existing === undefined) throw new Error(`Secret ${name} was deleted while it was being created`, { cause: error });
      if (!ownedBy(existing, key)) throw new SecretNameTakenError(`Secret ${name} exists and is not this Key's (it has no owner reference to it): delete or rename it, and the Key gets its own`);
      return hashOfSecret(existing);
    }
  }

  async delete(key: GwObject<'Key'>): Promise<void> {
    const { namespace } = key.metadata;
    const name = keySecretName(key.metadata.name);
    const existing = await this.#read(namespace, name);
    if (existing === undefined || !ownedBy(existing, key)) return;
    try {
      // Only the Secret just read: one made anew under that name meanwhile is not this Key's.
      await this.#api.deleteNamespacedSecret({ name, namespace, body: { preconditions: { uid: existing.metadata?.uid } } });
    } catch (error) {
      if (!isNotFound(error) && !isConflict(error)) throw error;
    }
  }
}
