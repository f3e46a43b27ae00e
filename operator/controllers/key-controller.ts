import { sessionFromKey } from '../../common/session-from-key.ts';
import { kinds } from '../../crds/kinds.ts';
import type { KeyStatus } from '../../crds/schemas/key.ts';
import { setKeyFinalizers, hasFinalizer, KEY_FINALIZER } from '../keys/finalizer.ts';
import { hashOfSecret, KeySecrets, keySecretName } from '../keys/key-secrets.ts';
import { errorMessage } from '../runtime/informer-set.ts';
import { splitKey, type GwObject } from '../runtime/gw-object.ts';

type Key = GwObject<'Key'>;
import { nextStatus, type DesiredStatus } from '../runtime/status.ts';
import type { ControllerContext } from './context.ts';

interface KeyIdentity {
  hash: string;
  secretName: string | undefined;
}

/**
 * Key → its Redis session under the key's hash (the key's identity). A kubectl-made Key
 * (no spec.key_hash) first gets a generated raw key in the Secret `gw-key-<name>`; an
 * admin-made Key (spec.key_hash) has its session reconciled from the spec. The finalizer
 * makes deletion wait until the session is gone from Redis; with Redis down the
 * reconcile fails and retries with backoff, the finalizer holding the Key until then.
 * The raw key is read only to hash it and is never logged or put in status or Events.
 */
export class KeyController {
  readonly kind = kinds.Key.kind;
  readonly #ctx: ControllerContext;
  readonly #secrets: KeySecrets;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    this.#secrets = new KeySecrets(ctx.kc);
  }

  async reconcile(queueKey: string): Promise<void> {
    const { namespace, name } = splitKey(queueKey);
    let key = this.#ctx.caches.keys.get(namespace, name);
    if (!key) return;
    if (key.metadata.deletionTimestamp) {
      if (hasFinalizer(key)) await this.#finalize(key);
      return;
    }
    if (!hasFinalizer(key)) key = await setKeyFinalizers(this.#ctx.kc, key, [...(key.metadata.finalizers ?? []), KEY_FINALIZER]);
    const identity = await this.#identity(key);
    const fields = { key_hash: identity.hash, secretName: identity.secretName, policies: this.#existingPolicies(key).found };
    try {
      const outcome = await this.#writeSession(key, identity.hash);
      if (!outcome.ok) {
        await this.#setStatus(key, { ready: false, reason: 'InvalidKey', message: outcome.message, fields });
        return;
      }
    } catch (error) {
      await this.#setStatus(key, { ready: false, reason: 'SessionStoreUnavailable', message: `could not write the session: ${errorMessage(error)}`, fields });
      throw error;
    }
    const { missing } = this.#existingPolicies(key);
    const desired: DesiredStatus<KeyStatus> =
      missing.length > 0
        ? { ready: false, reason: 'MissingPolicy', message: `apply_policies names ${missing.join(', ')}, not a Policy in namespace ${namespace}`, fields }
        : { ready: true, reason: 'SessionStored', message: 'session stored', fields };
    await this.#setStatus(key, desired);
  }

  #existingPolicies(key: Key): { found: string[]; missing: string[] } {
    const names = key.spec.apply_policies ?? [];
    const ns = key.metadata.namespace;
    const found = names.filter((p) => this.#ctx.caches.policies.get(ns, p) !== undefined);
    return { found: found.map((p) => `${ns}/${p}`), missing: names.filter((p) => !found.includes(p)) };
  }

  /** The key's hash: spec.key_hash (admin-made), else the generated key's, its Secret created on first sight. */
  async #identity(key: Key): Promise<KeyIdentity> {
    const specHash = key.spec.key_hash;
    let identity: KeyIdentity;
    if (specHash) identity = { hash: specHash, secretName: undefined };
    else {
      const secretName = keySecretName(key.metadata.name);
      const secret = this.#ctx.caches.secrets.get(key.metadata.namespace, secretName) ?? (await this.#secrets.read(key.metadata.namespace, secretName));
      let hash = hashOfSecret(secret);
      if (!secret) hash = await this.#secrets.create(key);
      if (!hash) throw new Error(`Secret ${secretName} holds no key`);
      identity = { hash, secretName };
    }
    const previous = key.status?.key_hash;
    // A new identity (Secret replaced, key_hash edited): the old session must stop working.
    if (previous !== undefined && previous !== identity.hash) await this.#ctx.sessions.delete(previous);
    return identity;
  }

  async #writeSession(key: Key, hash: string): Promise<{ ok: true } | { ok: false; message: string }> {
    const existing = await this.#ctx.sessions.get(hash);
    const outcome = sessionFromKey(key.spec, key.metadata.name, key.metadata.namespace, existing, new Date());
    if (!outcome.ok) return outcome;
    if (existing && JSON.stringify(existing) === JSON.stringify(outcome.session)) return { ok: true };
    await this.#ctx.sessions.put(hash, outcome.session);
    const where = key.spec.key_hash ? '' : ` (raw key in Secret ${keySecretName(key.metadata.name)})`;
    await this.#ctx.events.record(key, 'Normal', existing ? 'SessionUpdated' : 'SessionCreated', `session ${existing ? 'updated' : 'stored'} in Redis${where}`);
    return { ok: true };
  }

  async #finalize(key: Key): Promise<void> {
    const secretName = keySecretName(key.metadata.name);
    const hashes = new Set(
      [key.status?.key_hash, key.spec.key_hash, hashOfSecret(this.#ctx.caches.secrets.get(key.metadata.namespace, secretName))].filter(
        (h): h is string => typeof h === 'string' && h !== '',
      ),
    );
    for (const hash of hashes) await this.#ctx.sessions.delete(hash);
    await this.#secrets.delete(key.metadata.namespace, secretName);
    await setKeyFinalizers(this.#ctx.kc, key, (key.metadata.finalizers ?? []).filter((f) => f !== KEY_FINALIZER));
    this.#ctx.log.info({ key: `${key.metadata.namespace}/${key.metadata.name}` }, 'key session removed');
  }

  async #setStatus(key: Key, desired: DesiredStatus<KeyStatus>): Promise<void> {
    const status = nextStatus(key, desired);
    if (!status) return;
    await this.#ctx.status.write('Key', key, status);
    if (!desired.ready) await this.#ctx.events.record(key, 'Warning', desired.reason, desired.message);
  }
}
