import { createHash } from 'node:crypto';

/**
 * The label value standing for `text` (an api_id, a Key's name): label values are at most 63
 * characters of [A-Za-z0-9._-], so a longer or other text is hashed into one.
 */
export function labelValueFor(text: string): string {
  return /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/.test(text) ? text : `h-${createHash('sha256').update(text).digest('hex').slice(0, 40)}`;
}
