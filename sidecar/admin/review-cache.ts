import { createHash } from 'node:crypto';

/** How long a token's reviews are reused: short, so a revoked token or binding is noticed quickly. */
export const REVIEW_TTL_MS = 10_000;
/** How many tokens' reviews are kept at most; the oldest goes first. */
export const REVIEW_MAX_ENTRIES = 1_000;

export interface ReviewCacheOptions {
  ttlMs?: number;
  maxEntries?: number;
  now?: () => number;
}

interface Entry<T> {
  value: Promise<T>;
  expiresAt: number;
}

const tokenHash = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

/**
 * The token's own expiry in ms, when it is a JWT with a numeric `exp` (ServiceAccount and
 * OIDC tokens are). Read without checking the signature: it can only shorten how long an
 * answer of the API server about this token is reused, never make the token valid.
 */
export function tokenExpiry(token: string): number | undefined {
  const parts = token.split('.');
  if (parts.length !== 3) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as unknown;
    const exp = typeof claims === 'object' && claims !== null ? (claims as { exp?: unknown }).exp : undefined;
    return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * What the API server answered about one bearer token, reused for a short while so a
 * burst of reads with one token costs one review instead of one per read. Entries are
 * keyed by the token's SHA-256 (the token itself is not kept), live at most `ttlMs` from
 * the review and never past the token's `exp`, and at most `maxEntries` tokens are held.
 * Concurrent reads with one token share the review in flight; a review that fails is
 * dropped, so the next read asks again.
 */
export class ReviewCache<T> {
  readonly #entries = new Map<string, Entry<T>>();
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #now: () => number;

  constructor(options: ReviewCacheOptions = {}) {
    this.#ttlMs = options.ttlMs ?? REVIEW_TTL_MS;
    this.#maxEntries = options.maxEntries ?? REVIEW_MAX_ENTRIES;
    this.#now = options.now ?? Date.now;
  }

  /** The kept answer for `token`, or `review()`'s, kept from now on. */
  get(token: string, review: () => Promise<T>): Promise<T> {
    const now = this.#now();
    const key = tokenHash(token);
    const hit = this.#entries.get(key);
    if (hit !== undefined && hit.expiresAt > now) return hit.value;
    this.#entries.delete(key);
    const value = review();
    const expiresAt = Math.min(now + this.#ttlMs, tokenExpiry(token) ?? Infinity);
    if (expiresAt <= now) return value;
    this.#makeRoom(now);
    const entry = { value, expiresAt };
    this.#entries.set(key, entry);
    value.catch(() => {
      if (this.#entries.get(key) === entry) this.#entries.delete(key);
    });
    return value;
  }

  #makeRoom(now: number): void {
    if (this.#entries.size < this.#maxEntries) return;
    for (const [key, entry] of this.#entries) {
      if (entry.expiresAt <= now) this.#entries.delete(key);
    }
    // Maps iterate in insertion order: the first keys are the oldest reviews.
    for (const key of this.#entries.keys()) {
      if (this.#entries.size < this.#maxEntries) break;
      this.#entries.delete(key);
    }
  }
}
