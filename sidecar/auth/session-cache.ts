import { hash } from 'node:crypto';
import type { MaybePromise } from '../../common/maybe-promise.ts';
import { parseSession, type SessionStore } from '../../common/session-store.ts';
import { keyHash } from '../../crds/key-hash.ts';
import type { Session } from '../../crds/session.ts';

/**
 * Raw keys longer than this are hashed every time rather than remembered, so the memo of
 * known keys' hashes stays small whatever keys clients send.
 */
const maxRememberedKeyLength = 256;

interface Entry {
  session: Session | null;
  /** SHA-1 of the stored JSON the session was parsed from; null when there was none. */
  digest: string | null;
  expiresAt: number;
}

/**
 * A very short-lived in-process cache in front of the session store. A hot key then costs
 * one store read per TTL per sidecar instead of one per request, while a revoked,
 * deactivated or re-policied key is honoured fleet-wide within the same fraction of a
 * second; so the TTL stays at a few hundred milliseconds, never minutes. Unknown keys are
 * cached too, so a flood of bad keys cannot turn into a flood of store reads, and
 * concurrent misses for one key share a single read.
 *
 * It also remembers the hash of each raw key whose session was found lately (as many keys as
 * sessions), so a known key's next request is not hashed again: SHA-256 was a gateway's
 * largest single cost per authenticated request after the socket writes
 * (docs/architecture.md#performance). Unknown keys are hashed every time, so a flood of them
 * cannot push the known keys out.
 *
 * A read that finds the same JSON as the entry it replaces keeps the session parsed from it
 * (the same object), instead of parsing it again: the parse cost about ten times the digest
 * that tells them apart, and the limit engine's per-session plans and the store's encodings
 * are kept per session object, so they stay built too (docs/architecture.md#performance).
 */
export class SessionCache {
  readonly #store: SessionStore;
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #entries = new Map<string, Entry>();
  readonly #inFlight = new Map<string, Promise<Session | null>>();
  /** Raw key -> its hash, for keys whose session was found; oldest first. */
  readonly #hashes = new Map<string, string>();

  constructor(store: SessionStore, ttlMs = 250, maxEntries = 10_000) {
    this.#store = store;
    this.#ttlMs = ttlMs;
    this.#maxEntries = maxEntries;
  }

  /** The session (null: no such key); a cached one is returned as it is, so a hit takes no promise. */
  get(keyHash: string): MaybePromise<Session | null> {
    const now = Date.now();
    const entry = this.#entries.get(keyHash);
    if (entry !== undefined && entry.expiresAt > now) return entry.session;
    const pending = this.#inFlight.get(keyHash);
    if (pending !== undefined) return pending;
    const read = this.#store.getJson(keyHash).then(
      (json) => {
        this.#inFlight.delete(keyHash);
        const digest = json === null ? null : hash('sha1', json, 'base64');
        const previous = this.#entries.get(keyHash);
        const session = previous !== undefined && previous.digest === digest ? previous.session : parseSession(json);
        this.#remember(keyHash, session, digest);
        return session;
      },
      (err: unknown) => {
        this.#inFlight.delete(keyHash);
        throw err;
      },
    );
    this.#inFlight.set(keyHash, read);
    return read;
  }

  /** The key's hash (crds/key-hash.ts), from memory when the key authenticated lately. */
  keyHashOf(rawKey: string): string {
    return this.#hashes.get(rawKey) ?? keyHash(rawKey);
  }

  /** Remembers a raw key whose session was found, so `keyHashOf` need not hash it again. */
  rememberKey(rawKey: string, hash: string): void {
    if (rawKey.length > maxRememberedKeyLength || this.#hashes.has(rawKey)) return;
    if (this.#hashes.size >= this.#maxEntries) {
      const oldest = this.#hashes.keys().next().value;
      if (oldest !== undefined) this.#hashes.delete(oldest);
    }
    this.#hashes.set(rawKey, hash);
  }

  #remember(keyHash: string, session: Session | null, digest: string | null): void {
    this.#entries.delete(keyHash);
    if (this.#entries.size >= this.#maxEntries) {
      // Maps iterate in insertion order: the first entry is the oldest.
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
    this.#entries.set(keyHash, { session, digest, expiresAt: Date.now() + this.#ttlMs });
  }
}
