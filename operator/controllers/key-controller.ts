import { ReplyError } from 'ioredis';
import { sessionFromKey } from '../../common/session-from-key.ts';
import { apiIdsOfChange, coveredApiIds } from '../config/compile-api.ts';
import { EVERY_API } from '../../crds/policy-coverage.ts';
import type { KeyStatus } from '../../crds/schemas/key.ts';
import { patternMistake } from '../../crds/rate-limit-pattern.ts';
import type { KindController } from '../kit/controller.ts';
import { addFinalizer, hasFinalizer, removeFinalizer, setStatus } from '../kit/controllerutil.ts';
import { LeaseLapsedError, TerminalError, type Request, type Result } from '../kit/reconciler.ts';
import { forObjects, owns, requestFor, specChanged, statusOnlyUpdate, watches, watchesStatus, type Watch, type WatchEvent } from '../kit/watch.ts';
import { labelValueFor } from '../../common/label-value.ts';
import { hashOfSecret, KEY_DATA, KEY_LABEL, keyNameOfSecret, keySecretName, SecretNameTakenError } from '../keys/key-secrets.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import { readyCondition, type DesiredStatus, type StatusFields } from '../runtime/status.ts';
import { keyHashOf, type ControllerContext } from './context.ts';

type Key = GwObject<'Key'>;
type Policy = GwObject<'Policy'>;

/** A Key's `namespace/name`. */
const refOf = (key: Key): string => `${key.metadata.namespace}/${key.metadata.name}`;
const createdAt = (key: Key): number => new Date(key.metadata.creationTimestamp ?? 0).getTime();
/** Its raw key is in its own Secret (kubectl-made), rather than named by its hash (admin-made, or copied). */
const generated = (key: Key): boolean => key.spec.key_hash === undefined;
/** The status fields a Key keeps while its session cannot be changed (a deleted one held by its finalizers, too): what it was. */
const fieldsKept = (key: Key): StatusFields<KeyStatus> => ({
  key_hash: key.status?.key_hash,
  secretName: key.status?.secretName,
  policies: key.status?.policies ?? [],
  sessionStored: key.status?.sessionStored,
});
/** Whether the status says this Key's session was written under `hash`: then one found missing was lost from Redis. */
const storedBefore = (key: Key, hash: string): boolean => key.status?.key_hash === hash && key.status.sessionStored === true;

/** Cleanup outside the API server: the Redis session of a deleted Key. */
export const KEY_FINALIZER = 'gw.dev/key-session';

interface KeyIdentity {
  hash: string;
  secretName: string | undefined;
  /** A Secret generated before spec.key_hash was set: deleted once the session of its key is. */
  staleSecret: boolean;
}

/** A kubectl-made Key whose raw key cannot be had: its Secret's name is taken, or its Secret holds none. */
interface Unidentified {
  reason: 'SecretNameTaken' | 'SecretHoldsNoKey';
  message: string;
}

/** How often a Key whose Secret name another Secret holds is looked at again. */
const SECRET_NAME_RETRY_MS = 30_000;

/**
 * Key → its Redis session under the key's hash (the key's identity). A kubectl-made Key
 * (no spec.key_hash) first gets a generated raw key in the Secret `gw-key-<name>`; an
 * admin-made Key (spec.key_hash) has its session reconciled from the spec. The finalizer
 * makes deletion wait until the session is gone from Redis; with Redis down the
 * reconcile fails and retries with backoff, the finalizer holding the Key until then.
 * The raw key is read only to hash it and is never logged or put in status or Events.
 * Of several Keys whose key has one hash (a copied manifest's key_hash, a generated key's hash
 * copied from its status, one raw key put in two Secrets), one holds the session: the Key whose
 * own Secret holds the raw key over one that names the hash in its spec (else whoever can read
 * a status could take a key over), then the oldest. The others are DuplicateKeyHash and write
 * nothing, and deleting one leaves the session to the Key holding it.
 */
export class KeyController implements KindController {
  readonly kind = 'Key';
  readonly watches: Watch[];
  readonly #ctx: ControllerContext;

  constructor(ctx: ControllerContext) {
    this.#ctx = ctx;
    const { apis, keys, policies, secrets } = ctx.caches;
    const { keysByPolicy, keysByGrantedApi } = ctx.indexes;
    this.watches = [
      forObjects(keys),
      // A Key coming, going or changing its key's hash may change which of the Keys with that hash holds it.
      watches(keys, (event) => {
        const [now, before] = [keyHashOf(event.object), event.old && keyHashOf(event.old)];
        // A generated key's hash reaches the index with its status.
        if (statusOnlyUpdate(event) && now === before) return [];
        const hashes = new Set([now, before].filter((hash) => hash !== undefined));
        return [...hashes].flatMap((hash) => this.#othersNaming(hash, event.object)).map(requestFor);
      }),
      owns(secrets, (secret) => {
        const keyName = secret.metadata?.labels?.[KEY_LABEL] ? keyNameOfSecret(secret.metadata.name ?? '') : undefined;
        return keyName ? { namespace: secret.metadata?.namespace ?? '', name: keyName } : undefined;
      }),
      // A policy appearing or going decides whether the keys naming it are Ready.
      watches(policies, (event) => {
        if (!specChanged(event)) return [];
        const { namespace, name } = event.object.metadata;
        return keysByPolicy.get(name, namespace).map(requestFor);
      }),
      // A policy refused, or taken again, may be in force nowhere, or again somewhere.
      watchesStatus(policies, (event) => {
        if (!refusalChanged(event)) return [];
        const { namespace, name } = event.object.metadata;
        return keysByPolicy.get(name, namespace).map(requestFor);
      }),
      // An API taking a refused policy's last good version in, or leaving it out, decides whether it is in force anywhere.
      watchesStatus(apis, (event) => {
        const before = event.old?.status?.policies ?? [];
        const after = event.verb === 'delete' ? [] : (event.object.status?.policies ?? []);
        const changed = [...before.filter((ref) => !after.includes(ref)), ...after.filter((ref) => !before.includes(ref))];
        return changed.flatMap((ref) => {
          const [namespace = '', name = ''] = ref.split('/');
          const policy = policies.get(namespace, name);
          return policy && readyCondition(policy)?.status === 'False' ? keysByPolicy.get(name, namespace).map(requestFor) : [];
        });
      }),
      // An API appearing, going or changing its api_id decides whether the keys granted it are Ready.
      watches(apis, (event) => {
        if (!specChanged(event)) return [];
        const ids = apiIdsOfChange(event);
        return [...ids].flatMap((id) => keysByGrantedApi.get(id)).map(requestFor);
      }),
    ];
  }

  async reconcile({ namespace, name }: Request, signal: AbortSignal): Promise<Result | void> {
    let key = this.#ctx.caches.keys.get(namespace, name);
    if (!key) return;
    if (key.metadata.deletionTimestamp) {
      if (hasFinalizer(key, KEY_FINALIZER)) await this.#finalize(key, signal);
      return;
    }
    key = await addFinalizer(this.#ctx.finalizers, 'Key', key, KEY_FINALIZER);
    const identity = await this.#identity(key);
    if ('reason' in identity) return this.#unidentified(key, identity);
    // Until the session under the previous hash is gone, the status names that hash: the
    // session to remove at the next try (and on delete), and the key that still works.
    await this.#storeOrSay(key, fieldsKept(key), 'could not remove the session of the key it had before, which works until then', () => this.#retire(key, identity.hash));
    // Kept until then: the key that still works is readable where the status says it is.
    if (identity.staleSecret) await this.#ctx.keySecrets.delete(key);
    const policies = this.#existingPolicies(key).found;
    const fields = { key_hash: identity.hash, secretName: identity.secretName, policies };
    const holder = this.#holder(identity.hash, key);
    if (holder !== undefined && refOf(holder) !== refOf(key)) {
      const own = key.spec.key_hash === undefined ? `the key in Secret ${identity.secretName} has` : 'spec.key_hash is';
      const why = generated(holder) && !generated(key) ? "whose own Secret holds that key" : 'which is older';
      const message = `${own} the hash of Key ${refOf(holder)}'s key, ${why} and holds its session: this Key is not in force`;
      await this.#setStatus(key, { ready: false, reason: 'DuplicateKeyHash', message, fields });
      return;
    }
    signal.throwIfAborted();
    // What is known of the session in Redis while it is not written now: stored before under this hash, or not.
    const unwritten = { ...fields, sessionStored: storedBefore(key, identity.hash) || undefined };
    const outcome = await this.#storeOrSay(key, unwritten, 'could not write the session', () => this.#writeSession(key, identity.hash));
    if (!outcome.ok) {
      await this.#setStatus(key, { ready: false, reason: 'InvalidKey', message: outcome.message, fields: unwritten });
      return;
    }
    await this.#setStatus(key, this.#readiness(key, { ...fields, sessionStored: true }));
  }

  /**
   * Runs a change to the Key's session in Redis; should Redis fail it, the status says so
   * (SessionStoreUnavailable, with `fields`: what Redis holds meanwhile) and the failure is
   * thrown for the reconcile to be retried.
   */
  async #storeOrSay<T>(key: Key, fields: StatusFields<KeyStatus>, failed: string, change: () => Promise<T>): Promise<T> {
    try {
      return await change();
    } catch (error) {
      if (error instanceof LeaseLapsedError) throw error;
      await this.#setStatus(key, { ready: false, reason: 'SessionStoreUnavailable', message: `${failed}: ${sessionStoreProblem(error)}`, fields });
      throw error;
    }
  }

  /**
   * A new identity (Secret replaced or emptied, key_hash edited): the session under the hash
   * the status names stops working, unless another Key names that hash and takes it over.
   */
  async #retire(key: Key, hash: string | undefined): Promise<void> {
    const previous = key.status?.key_hash;
    if (previous !== undefined && previous !== hash && !this.#namedByOthers(previous, key)) await this.#ctx.sessions.delete(previous);
  }

  /** A Key without a raw key to be had: says why, and looks again or waits for a change. */
  async #unidentified(key: Key, identity: Unidentified): Promise<Result> {
    let fields = { ...fieldsKept(key), policies: this.#existingPolicies(key).found };
    if (identity.reason === 'SecretHoldsNoKey') {
      // The Secret is the key: emptied, the key it held stops working, as when it is replaced.
      await this.#storeOrSay(key, fields, 'could not remove the session of the key the Secret held, which works until then', () => this.#retire(key, undefined));
      fields = { ...fields, key_hash: undefined, sessionStored: undefined };
    }
    await this.#setStatus(key, { ready: false, reason: identity.reason, message: identity.message, fields });
    // A name taken by a Secret of someone else's is freed without a change the operator
    // watches (it watches only its own Secrets): look again until it is.
    if (identity.reason === 'SecretNameTaken') return { requeueAfterMs: SECRET_NAME_RETRY_MS };
    throw new TerminalError(identity.message);
  }

  /**
   * Ready, or why not: a policy or an API the key names that does not exist, or a mistake in its
   * own rate_limit_pattern. The session is stored either way, so the key works as soon as what
   * it names appears (and counts by its pattern as written: docs/behaviour.md#custom-rate-limit-keys).
   */
  #readiness(key: Key, fields: StatusFields<KeyStatus>): DesiredStatus<KeyStatus> {
    const problems: { reason: string; message: string }[] = [];
    // The gateways refuse a key past its expiry (Unix seconds; 0 or less: never). A Key that
    // expires while nothing changes shows it at the next resync.
    const expires = key.spec.expires ?? 0;
    if (expires > 0 && expires * 1000 < Date.now()) {
      problems.push({ reason: 'Expired', message: `expires (${new Date(expires * 1000).toISOString()}) has passed: the gateways refuse the key (403)` });
    }
    if (key.spec.is_inactive === true) problems.push({ reason: 'Inactive', message: 'is_inactive is true: the gateways refuse the key (403) until it is false' });
    const missingPolicies = this.#existingPolicies(key).missing;
    if (missingPolicies.length > 0) {
      problems.push({ reason: 'MissingPolicy', message: `apply_policies names ${missingPolicies.join(', ')}, not a Policy in namespace ${key.metadata.namespace}` });
    }
    const notInForce = this.#policiesInForceNowhere(key);
    if (notInForce.length > 0) {
      const named = notInForce.map((policy) => `${policy.metadata.name} (${readyCondition(policy)?.reason})`).join(', ');
      problems.push({ reason: 'PolicyNotInForce', message: `apply_policies names ${named}, in force on no API: what it grants and limits does not apply to this key` });
    }
    const missingApis = this.#missingApis(key);
    if (missingApis.length > 0) {
      problems.push({ reason: 'MissingApi', message: `access_rights names ${missingApis.map((id) => `api_id "${id}"`).join(', ')}, not an ApiDefinition` });
    }
    const mistake = patternMistake(key.spec.meta_data?.rate_limit_pattern);
    if (mistake !== null) problems.push({ reason: 'InvalidRateLimitPattern', message: `meta_data.rate_limit_pattern: ${mistake}` });
    const [first] = problems;
    if (!first) return { ready: true, reason: 'SessionStored', message: 'session stored', fields };
    return { ready: false, reason: first.reason, message: problems.map((p) => p.message).join('; '), fields };
  }

  /**
   * The applied Policies that are not Ready and that no API serves (docs/behaviour.md#bad-edits):
   * one refused before it ever compiled, say. A refused one that an API keeps at its last good
   * version is in force there, and named in that ApiDefinition's status.policies.
   */
  #policiesInForceNowhere(key: Key): Policy[] {
    const ns = key.metadata.namespace;
    const applied = (key.spec.apply_policies ?? []).flatMap((name) => this.#ctx.caches.policies.get(ns, name) ?? []);
    return applied.filter((policy) => readyCondition(policy)?.status === 'False' && !this.#inForceSomewhere(policy));
  }

  #inForceSomewhere(policy: Policy): boolean {
    const ref = `${policy.metadata.namespace}/${policy.metadata.name}`;
    const covered = coveredApiIds(policy);
    const apis = covered.includes(EVERY_API) ? this.#ctx.caches.apis.list() : covered.flatMap((id) => this.#ctx.indexes.apisById.get(id));
    return apis.some((api) => api.status?.policies?.includes(ref) === true);
  }

  #missingApis(key: Key): string[] {
    const named = Object.keys(key.spec.access_rights ?? {});
    if (named.length === 0) return [];
    return named.filter((id) => !this.#ctx.indexes.apisById.has(id)).sort();
  }

  #existingPolicies(key: Key): { found: string[]; missing: string[] } {
    const names = key.spec.apply_policies ?? [];
    const ns = key.metadata.namespace;
    const found = names.filter((p) => this.#ctx.caches.policies.get(ns, p) !== undefined);
    return { found: found.map((p) => `${ns}/${p}`), missing: names.filter((p) => !found.includes(p)) };
  }

  /**
   * The key's hash: spec.key_hash (admin-made; a Secret generated before is stale, deleted with
   * the session of its key), else the generated key's, its Secret created on first sight; or
   * why there is none.
   */
  async #identity(key: Key): Promise<KeyIdentity | Unidentified> {
    const specHash = key.spec.key_hash;
    const secretName = keySecretName(key.metadata.name);
    // The cache holds only the operator's Secrets; one of this Key's is labelled with its name.
    const cached = this.#ctx.caches.secrets.get(key.metadata.namespace, secretName);
    const secret = cached?.metadata?.labels?.[KEY_LABEL] === labelValueFor(key.metadata.name) ? cached : undefined;
    let identity: KeyIdentity;
    if (specHash) {
      identity = { hash: specHash, secretName: undefined, staleSecret: secret !== undefined };
    } else {
      // Not in the cache: almost always a new Key, so create at once; a Secret the cache has
      // not seen yet makes the create conflict, and then it is read (KeySecretStore.create).
      let hash: string | undefined;
      try {
        hash = secret ? hashOfSecret(secret) : await this.#ctx.keySecrets.create(key);
      } catch (error) {
        if (error instanceof SecretNameTakenError) return { reason: 'SecretNameTaken', message: error.message };
        throw error;
      }
      // Retrying cannot fill the Secret: a change to it enqueues the Key again.
      if (!hash) return { reason: 'SecretHoldsNoKey', message: secretHoldsNoKey(secretName) };
      identity = { hash, secretName, staleSecret: false };
    }
    return identity;
  }

  async #writeSession(key: Key, hash: string): Promise<{ ok: true } | { ok: false; message: string }> {
    const existing = await this.#ctx.sessions.get(hash);
    const outcome = sessionFromKey(key.spec, key.metadata, existing, new Date());
    if (!outcome.ok) return outcome;
    if (!outcome.changed) return { ok: true };
    await this.#ctx.sessions.put(hash, outcome.session);
    const where = key.spec.key_hash ? '' : ` (raw key in Secret ${keySecretName(key.metadata.name)})`;
    // A session this Key object writes for the first time (one create-key stored before the
    // Key existed, or one of a Key made again under the same hash) is stored for it.
    const updated = existing !== null && existing.key_uid === key.metadata.uid;
    if (existing === null && storedBefore(key, hash)) {
      this.#ctx.metrics.sessionsRestored.inc();
      this.#ctx.events.record(key, 'Warning', 'SessionRestored', `session was missing from Redis (restarted empty, flushed or evicted) and is stored again${where}`);
    } else {
      this.#ctx.events.record(key, 'Normal', updated ? 'SessionUpdated' : 'SessionCreated', `session ${updated ? 'updated' : 'stored'} in Redis${where}`);
    }
    return { ok: true };
  }

  async #finalize(key: Key, signal: AbortSignal): Promise<void> {
    const secretName = keySecretName(key.metadata.name);
    const hashes = new Set(
      [key.status?.key_hash, key.spec.key_hash, hashOfSecret(this.#ctx.caches.secrets.get(key.metadata.namespace, secretName))].filter(
        (h): h is string => typeof h === 'string' && h !== '',
      ),
    );
    try {
      for (const hash of hashes) if (!this.#namedByOthers(hash, key)) await this.#ctx.sessions.delete(hash);
    } catch (error) {
      if (error instanceof LeaseLapsedError) throw error;
      // The finalizer holds the Key until its session is gone: say so where kubectl shows it.
      const message = `the Key is deleted once its session is removed from Redis, which failed: ${sessionStoreProblem(error)}`;
      await this.#setStatus(key, { ready: false, reason: 'SessionStoreUnavailable', message, fields: fieldsKept(key) });
      throw error;
    }
    await this.#ctx.keySecrets.delete(key);
    signal.throwIfAborted();
    // Another finalizer keeps the Key once this one goes: its status must not go on saying its session is stored.
    const others = (key.metadata.finalizers ?? []).filter((f) => f !== KEY_FINALIZER);
    if (others.length > 0) {
      const message = `session removed from Redis: the key no longer works; the Key waits on its other finalizers (${others.join(', ')})`;
      await this.#setStatus(key, { ready: false, reason: 'SessionRemoved', message, fields: { ...fieldsKept(key), sessionStored: undefined } });
    }
    await removeFinalizer(this.#ctx.finalizers, 'Key', key, KEY_FINALIZER);
    // Not under `key`, which the logger redacts as a credential: the line would name no Key.
    this.#ctx.log.info({ object: `${key.metadata.namespace}/${key.metadata.name}` }, 'key session removed');
  }

  /** Another Key, not being deleted, names `hash`: its session is that Key's to keep (or to take over). */
  #namedByOthers(hash: string, key: Key): boolean {
    return this.#othersNaming(hash, key).some((other) => !other.metadata.deletionTimestamp);
  }

  /** The Keys other than `key` whose key has `hash` (keysByHash). */
  #othersNaming(hash: string, key: Key): Key[] {
    const own = refOf(key);
    return this.#ctx.indexes.keysByHash.get(hash).filter((other) => refOf(other) !== own);
  }

  /**
   * The Key whose session `hash` is, of those not being deleted: one whose own Secret holds the
   * key, then the oldest, then the first by namespace/name; undefined when every one is going.
   * Two Keys with one hash would each write the one session in turn, every resync.
   */
  #holder(hash: string, asking: Key): Key | undefined {
    const live = [asking, ...this.#othersNaming(hash, asking)].filter((key) => !key.metadata.deletionTimestamp);
    const rank = (key: Key): number => (generated(key) ? 0 : 1);
    return live.sort((a, b) => rank(a) - rank(b) || createdAt(a) - createdAt(b) || refOf(a).localeCompare(refOf(b)))[0];
  }

  async #setStatus(key: Key, desired: DesiredStatus<KeyStatus>): Promise<void> {
    await setStatus(this.#ctx, 'Key', key, desired);
  }
}

/** A policy turned not Ready, or Ready again: whether it is in force anywhere may have changed. The first Ready=True is not such a change. */
function refusalChanged(event: WatchEvent<Policy>): boolean {
  const refused = (policy: Policy | undefined): boolean => policy !== undefined && readyCondition(policy)?.status === 'False';
  return refused(event.old) !== refused(event.verb === 'delete' ? undefined : event.object);
}

function secretHoldsNoKey(secretName: string): string {
  return (
    `Secret ${secretName} holds no usable key in its "${KEY_DATA}" entry (it is empty, or begins or ends with whitespace, ` +
    `such as echo's newline, which no HTTP client can send): put one there (kubectl create secret generic ${secretName} --from-literal=${KEY_DATA}=… --dry-run=client -o yaml | kubectl apply -f -), ` +
    'or delete the Secret for a new one to be generated'
  );
}

/**
 * A failed session write or removal as a Key's status and Events say it: a refusal from Redis
 * itself (a reply such as OOM) in its words, a command timed out as such, anything else as
 * Redis not being connected. The
 * client library's wording ("Stream isn't writeable and enableOfflineQueue options is false")
 * means nothing to the Key's owner; the error stays in the operator's log, where the failed
 * reconcile is logged with it.
 */
function sessionStoreProblem(error: unknown): string {
  if (error instanceof ReplyError && error instanceof Error) return `Redis refused it: ${error.message}`;
  // ioredis's commandTimeout rejects with this plain Error: connected, but no answer came.
  if (error instanceof Error && error.message === 'Command timed out') return 'Redis did not answer in time';
  return 'Redis is not connected';
}
