import { createHash, timingSafeEqual } from 'node:crypto';

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

/**
 * Compares a presented credential with the configured secret in constant time: both are
 * hashed first so neither the length nor a common prefix shows in the timing. An empty
 * configured secret matches nothing, so an unset secret never opens the operation.
 */
export function secretMatches(presented: string | undefined, configured: string): boolean {
  if (configured === '' || presented === undefined) return false;
  return timingSafeEqual(digest(presented), digest(configured));
}

/** Constant-time check of a presented value against a precomputed SHA-256 digest. */
export function digestMatches(presented: string, expected: Buffer): boolean {
  return timingSafeEqual(digest(presented), expected);
}

export { digest as secretDigest };
