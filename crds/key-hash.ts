import { createHash } from 'node:crypto';

/** Identity of a key everywhere it is stored (sessions, Key resources): hex SHA-256 of the raw key. */
export function keyHash(rawKey: string): string {
  return createHash('sha256').update(rawKey, 'utf8').digest('hex');
}

/** What a stored key hash looks like (and what the Key CRD's `key_hash` pattern enforces). */
export const keyHashPattern = '^[0-9a-f]{64}$';
