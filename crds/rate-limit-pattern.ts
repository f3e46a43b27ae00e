/**
 * The syntax of a `rate_limit_pattern` (docs/behaviour.md#custom-rate-limit-keys), one
 * definition for the compile step that checks a Policy's and the gateway that evaluates it.
 */

export const metaPrefix = '$gw_meta.';
/** A reference inside a part's text: the prefix and a name of word characters (`org-$gw_meta.org`). */
export const embeddedReference = /\$gw_meta\.(\w+)/g;

/**
 * A pattern's `|`-separated parts, each without the whitespace around it: `$gw_meta.org | $gw_meta.team`
 * reads as written for people, where the untrimmed parts would name a field `org ` that no key has.
 */
export const patternParts = (pattern: string): string[] => pattern.split('|').map((part) => part.trim());

/**
 * What keeps a pattern from meaning what it says, or null: a `$` that starts no reference
 * (`$GW_META.org`, `${gw_meta.org}`), or a `$gw_meta.` that names no field. Such text is the
 * same for every key, so it would put every key of the Policy in one allowance. No pattern
 * (absent, empty, or not text, which the schemas refuse) has none.
 */
export function patternMistake(pattern: unknown): string | null {
  if (typeof pattern !== 'string') return null;
  for (const part of patternParts(pattern)) {
    if (part === metaPrefix) return `"${metaPrefix}" names no field: write ${metaPrefix}FIELD`;
    if (part.startsWith(metaPrefix)) continue;
    if (part.replace(embeddedReference, '').includes('$')) {
      return `"${part}" has a "$" that starts no ${metaPrefix}FIELD reference (the prefix is lower case, without braces: ${metaPrefix}org), so it is the same text for every key`;
    }
  }
  return null;
}
