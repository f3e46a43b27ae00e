import { createHash } from 'node:crypto';

const metaPrefix = '$gw_meta.';

/**
 * Evaluates a `rate_limit_pattern` (docs/behaviour.md#custom-rate-limit-keys): `|`-joined parts, each a literal or a
 * `$gw_meta.FIELD` reference to the session's metadata. Null when the pattern does not
 * take effect: a referenced field is absent (or not a scalar), or the result is empty.
 */
export function evaluatePattern(pattern: string, metaData: Record<string, unknown>): string | null {
  const parts: string[] = [];
  for (const part of pattern.split('|')) {
    if (!part.startsWith(metaPrefix)) {
      parts.push(part);
      continue;
    }
    const value = metaData[part.slice(metaPrefix.length)];
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') return null;
    parts.push(String(value));
  }
  const joined = parts.join('|');
  return joined === '' ? null : joined;
}

/**
 * The rate-limit identity: the pattern value when it takes effect, else the credential.
 * The pattern value is hashed because it may carry personal data (an address, a user
 * id) and it ends up in Redis key names and Events; the key hash is already a hash.
 */
export function rateLimitIdentity(
  pattern: string | null,
  metaData: Record<string, unknown>,
  keyHash: string,
): string {
  const value = pattern === null ? null : evaluatePattern(pattern, metaData);
  if (value === null) return `k:${keyHash}`;
  return `p:${createHash('sha256').update(value).digest('hex')}`;
}
