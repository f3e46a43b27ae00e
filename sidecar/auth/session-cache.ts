import { hash } from 'node:crypto';
import type { MaybePromise } from '../../common/maybe-promise.ts';
import { parseSession, type SessionReads } from '../../common/session-store.ts';
import { keyHash } from '../../crds/key-hash.ts';
import type { Session } from '../../crds/session.ts';

/**
 * Raw keys longer than this are hashed every time rather than remembered, so the memo of
 * known keys' hashes stays small whatever keys clients send.
 */
const maxRememberedKeyLength = 256;

/** How long a session read stays cached while changes are not reported. */
export const SESSION_TTL_MS = 250;

/** Sessions a gateway process keeps by default (`--session-cache-size`). */
export const SESSION_CACHE_DEFAULT_SIZE = 10_000;

export interface SessionCacheOptions {
  /** How long an entry lives while changes are not tracked (default SESSION_TTL_MS). */
  ttlMs?: number;
  /**
   * Sessions kept, the oldest out first; as many unknown keys again, and as many raw keys'
   * hashes (default SESSION_CACHE_DEFAULT_SIZE).
   */
  size?: number;
  /** How long an entry lives while changes are tracked, against a report lost without a sign (default 60 s). */
  trackedTtlMs?: number;
  /**
   * Whether a key whose store read fails is answered from the session last read for it, however
   * old (the gateway fails open: `redis_failure_mode`). Default: never; the read's error stands.
   */
  servesStale?: () => boolean;
  /**
   * The session a key should have where the store holds none: the config folder's own copy of
   * its Key's session, while the folder writes it back to a Redis that lost it (flushed, or
   * restarted without persistence). Default: none; the key is unknown.
   */
  absent?: (keyHash: string) => string | null;
}

interface Entry {
  session: Session | null;
  /** SHA-1 of the stored JSON the session was parsed from; null when there was none. */
  digest: string | null;
  expiresAt: number;
  /**
   * A change to the stored session was reported since it was read (deleted with its Key, its
   * Secret rotated, edited): no longer what Redis holds, so a failed read never falls back on it.
   */
  changedSinceRead: boolean;
}

/** A store read under way, shared by the requests that wait for it. */
interface Read {
  result: Promise<Session | null>;
  /** Changes were tracked from before the read, and none of this key has been reported since. */
  tracked: boolean;
  /** A change of this key was reported while the read was under way: it may bring what was before. */
  changeReported: boolean;
}

/**
 * An in-process cache in front of the session store. While the store's changes are tracked
 * (sidecar/auth/session-changes.ts: Redis reports every change to a session), a session read
 * stays cached until its change is reported, so a fleet of keys that each come back every few
 * seconds costs no store read per request, and a revoked, deactivated or re-policied key is
 * honoured as soon as the report arrives. The tracked TTL only bounds what a lost report could
 * cost. While changes are not tracked (no Redis, a Redis that refuses, a report connection down),
 * an entry lives a few hundred milliseconds, never minutes, so a change is honoured fleet-wide
 * within that fraction of a second; losing the reports forgets every entry. Unknown keys are
 * cached too, so a flood of bad keys cannot turn into a flood of store reads, and within a
 * bound of their own, so it cannot push the known keys' sessions out either. Concurrent misses
 * for one key share a single read (docs/architecture.md#sessions).
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
  readonly #store: SessionReads;
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #trackedTtlMs: number;
  /** Keys whose session was found, oldest first. */
  readonly #entries = new Map<string, Entry>();
  /** Keys with no session, oldest first: a bound of their own, so they cannot push found ones out. */
  readonly #unknown = new Map<string, Entry>();
  readonly #inFlight = new Map<string, Read>();
  /** Raw key -> its hash, for keys whose session was found; oldest first. */
  readonly #hashes = new Map<string, string>();
  readonly #servesStale: () => boolean;
  readonly #absent: (keyHash: string) => string | null;
  #tracking = false;

  constructor(store: SessionReads, { ttlMs = SESSION_TTL_MS, size = SESSION_CACHE_DEFAULT_SIZE, trackedTtlMs = 60_000, servesStale = () => false, absent = () => null }: SessionCacheOptions = {}) {
    this.#store = store;
    this.#ttlMs = ttlMs;
    this.#maxEntries = size;
    this.#trackedTtlMs = trackedTtlMs;
    this.#servesStale = servesStale;
    this.#absent = absent;
  }

  /** The session (null: no such key); a cached one is returned as it is, so a hit takes no promise. */
  get(keyHash: string): MaybePromise<Session | null> {
    const now = Date.now();
    const entry = this.#entries.get(keyHash) ?? this.#unknown.get(keyHash);
    if (entry !== undefined && entry.expiresAt > now) return entry.session;
    const pending = this.#inFlight.get(keyHash);
    if (pending !== undefined) return pending.result;
    const read: Read = { result: this.#store.getJson(keyHash, entry !== undefined && entry.session !== null && !entry.changedSinceRead).then(
      (stored) => {
        this.#inFlight.delete(keyHash);
        const json = stored ?? this.#absent(keyHash);
        // Not in the store, so no change to it will be reported (deleting what is not there
        // changes nothing): kept for the short TTL only.
        if (stored === null && json !== null) read.tracked = false;
        const digest = json === null ? null : hash('sha1', json, 'base64');
        const previous = this.#entries.get(keyHash);
        const session = previous !== undefined && previous.digest === digest ? previous.session : parseSession(json);
        this.#remember(keyHash, { session, digest, expiresAt: Date.now() + (read.tracked ? this.#trackedTtlMs : this.#ttlMs), changedSinceRead: read.changeReported });
        return session;
      },
      (err: unknown) => {
        this.#inFlight.delete(keyHash);
        // Expired entries stay until replaced or pushed out: the last session read is still here,
        // served while it is the last Redis is known to hold, never once a change to it was reported.
        const last = this.#entries.get(keyHash) ?? this.#unknown.get(keyHash);
        if (last !== undefined && !last.changedSinceRead && this.#servesStale()) return last.session;
        throw err;
      },
    ), tracked: this.#tracking, changeReported: false };
    this.#inFlight.set(keyHash, read);
    return read.result;
  }

  /**
   * From now on every change to a stored session is reported (`changed`, `allChanged`) until
   * `trackingStopped`: what is read from here on may stay cached until its change is.
   */
  trackingStarted(): void {
    this.#tracking = true;
  }

  /**
   * Changes may go unreported from now on: every entry is read again at its next request,
   * and is then cached for the short TTL only.
   */
  trackingStopped(): void {
    this.#tracking = false;
    this.allChanged();
  }

  /**
   * The stored session of `keyHash` changed: its next request reads it again, and until a read
   * succeeds the entry is no answer (a revoked key must not come back in an outage). A read under
   * way may have answered before the change, so what it brings is kept for the short TTL only.
   */
  changed(keyHash: string): void {
    const entry = this.#entries.get(keyHash) ?? this.#unknown.get(keyHash);
    if (entry !== undefined) {
      entry.expiresAt = 0;
      entry.changedSinceRead = true;
    }
    const pending = this.#inFlight.get(keyHash);
    if (pending !== undefined) {
      pending.tracked = false;
      pending.changeReported = true;
    }
  }

  /**
   * The read under way for `keyHash` is answered where its changes are not reported (a Cluster
   * master that says the slot moved, or one with no report connection yet): what it brings is kept
   * for the short TTL only. Nothing says the session changed, so an outage still falls back on it.
   */
  untracked(keyHash: string): void {
    const pending = this.#inFlight.get(keyHash);
    if (pending !== undefined) pending.tracked = false;
  }

  /**
   * Any stored session may have changed (the store was flushed, or reports were lost). Nothing
   * says which, so each entry stays the last session read of its key for a failed read to fall back on.
   */
  allChanged(): void {
    for (const entry of this.#entries.values()) entry.expiresAt = 0;
    for (const entry of this.#unknown.values()) entry.expiresAt = 0;
    for (const pending of this.#inFlight.values()) pending.tracked = false;
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

  #remember(keyHash: string, entry: Entry): void {
    this.#entries.delete(keyHash);
    this.#unknown.delete(keyHash);
    const entries = entry.session === null ? this.#unknown : this.#entries;
    if (entries.size >= this.#maxEntries) {
      // Maps iterate in insertion order: the first entry is the oldest.
      const oldest = entries.keys().next().value;
      if (oldest !== undefined) entries.delete(oldest);
    }
    entries.set(keyHash, entry);
  }
}
