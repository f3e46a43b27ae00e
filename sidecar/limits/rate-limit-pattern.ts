import { createHash } from 'node:crypto';
import { embeddedReference, metaPrefix, patternParts } from '../../crds/rate-limit-pattern.ts';

/**
 * A metadata value as the pattern's text has it; null when absent, blank (empty or only
 * whitespace) or not a scalar. A blank value counts as absent: otherwise every key with that
 * field blank would share one allowance (`|` for `$gw_meta.org|$gw_meta.team`, or `| ` when
 * YAML kept a space), across tenants.
 */
function scalarText(metaData: Record<string, unknown>, field: string): string | null {
  const value = Object.hasOwn(metaData, field) ? metaData[field] : undefined;
  if (typeof value === 'string' && value.trim() === '') return null;
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' ? String(value) : null;
}

/** The escape that keeps a `|` inside a part apart from the `|` between parts: NUL, which metadata all but never holds. */
const escapeChar = '\0';
const escapable = /[\0|]/g;

/**
 * A part's text as it goes into the joined value: a `|` or NUL in it (from a metadata value)
 * is preceded by NUL, so that no two lists of parts join to one value (`a|b` then `c`, and
 * `a` then `b|c`, would both be `a|b|c`) and two keys whose metadata differ never share one
 * allowance. Text without either, nearly all of it, is unchanged, and so is its identity.
 */
const escapePart = (text: string): string => text.replace(escapable, (c) => escapeChar + c);

/**
 * Evaluates a `rate_limit_pattern` (docs/behaviour.md#custom-rate-limit-keys): `|`-joined parts, trimmed. A part that starts
 * with `$gw_meta.` references the field named by the rest of it; elsewhere in a part's text,
 * `$gw_meta.` and the word after it reference that field. Each part's text is escaped
 * (`escapePart`) before the join. Null when the pattern does not take effect: a referenced
 * field is absent (or empty, or not a scalar), or the result is empty.
 */
export function evaluatePattern(pattern: string, metaData: Record<string, unknown>): string | null {
  const parts: string[] = [];
  for (const part of patternParts(pattern)) {
    if (part.startsWith(metaPrefix)) {
      const value = scalarText(metaData, part.slice(metaPrefix.length));
      if (value === null) return null;
      parts.push(escapePart(value));
      continue;
    }
    let missing = false;
    parts.push(escapePart(part.replace(embeddedReference, (_, field: string) => scalarText(metaData, field) ?? ((missing = true), ''))));
    if (missing) return null;
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
