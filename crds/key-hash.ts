import { hash } from 'node:crypto';

/**
 * Identity of a key everywhere it is stored (sessions, Key resources): hex SHA-256 of the raw
 * key. The gateway hashes the key of every authenticated request: the one-shot hash costs a
 * fraction of a Hash object's.
 */
export function keyHash(rawKey: string): string {
  return hash('sha256', rawKey, 'hex');
}

/** What a stored key hash looks like (and what the Key CRD's `key_hash` pattern enforces). */
export const keyHashPattern = '^[0-9a-f]{64}$';
