import type { PeekResult } from './stores/store.ts';

export interface BucketResult {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Unix ms when the bucket is full again. */
  resetMs: number;
}

interface Bucket {
  tokens: number;
  updatedAt: number;
  perMs: number;
}

/** Tokens after refilling at share per `perMs` since the last update; a changed share (gateways joined or left) caps the bucket at once. */
const refilledTokens = (bucket: Bucket, share: number, perMs: number, nowMs: number): number =>
  Math.min(share, bucket.tokens + (Math.max(0, nowMs - bucket.updatedAt) * share) / perMs);

/** Unix ms when a bucket holding `tokens` is full again. */
const fullAt = (tokens: number, share: number, perMs: number, nowMs: number): number => nowMs + Math.ceil(((share - tokens) / share) * perMs);

/**
 * The Distributed Rate Limiter's in-process token buckets, one per limiter: capacity is
 * this gateway's share, refilled continuously at share per `per`. No store call.
 */
export class DrlBuckets {
  readonly #buckets = new Map<string, Bucket>();

  take(limiterId: string, share: number, perMs: number, nowMs: number): BucketResult {
    const bucket = this.#refilled(limiterId, share, perMs, nowMs);
    const allowed = bucket.tokens >= 1;
    if (allowed) bucket.tokens -= 1;
    return {
      allowed,
      limit: share,
      remaining: Math.floor(bucket.tokens),
      resetMs: fullAt(bucket.tokens, share, perMs, nowMs),
    };
  }

  /** The bucket as a request now would find it, in a store's peek terms; nothing is taken and the bucket is left as it is. */
  peek(limiterId: string, share: number, perMs: number, nowMs: number): PeekResult {
    const bucket = this.#buckets.get(limiterId);
    const tokens = bucket ? refilledTokens(bucket, share, perMs, nowMs) : share;
    const remaining = Math.floor(tokens);
    return { count: share - remaining, limit: share, remaining, resetMs: fullAt(tokens, share, perMs, nowMs) };
  }

  /** Gives back a token taken for a request that a later limit refused. */
  refund(limiterId: string, share: number): void {
    const bucket = this.#buckets.get(limiterId);
    if (bucket) bucket.tokens = Math.min(share, bucket.tokens + 1);
  }

  /** A bucket idle for a whole window is full and holds no information: dropping it bounds memory. */
  sweep(nowMs: number): void {
    for (const [id, bucket] of this.#buckets) if (nowMs - bucket.updatedAt >= bucket.perMs) this.#buckets.delete(id);
  }

  get size(): number {
    return this.#buckets.size;
  }

  #refilled(limiterId: string, share: number, perMs: number, nowMs: number): Bucket {
    let bucket = this.#buckets.get(limiterId);
    if (!bucket) {
      bucket = { tokens: share, updatedAt: nowMs, perMs };
      this.#buckets.set(limiterId, bucket);
      return bucket;
    }
    bucket.tokens = refilledTokens(bucket, share, perMs, nowMs);
    bucket.updatedAt = nowMs;
    bucket.perMs = perMs;
    return bucket;
  }
}
