import { linearTimeRefusal, pathRegex } from './path-regex.ts';

/**
 * Endpoint matchers: every path becomes an anchored regular-expression source that the
 * sidecar compiles once at config load. Classic paths are regular expressions already;
 * OAS paths are literal apart from their `{placeholder}` segments.
 */

const placeholder = /\{[A-Za-z_][A-Za-z0-9_.-]*\}/g;
const regexSpecial = /[.*+?^${}()|[\]\\]/g;

export type PatternResult = { ok: true; pattern: string } | { ok: false; message: string };

function anchored(source: string): PatternResult {
  const pattern = `^(?:${source})$`;
  try {
    pathRegex(pattern);
  } catch (err) {
    return { ok: false, message: (err as Error).message };
  }
  const refusal = linearTimeRefusal(pattern);
  return refusal === null ? { ok: true, pattern } : { ok: false, message: refusal };
}

/** A classic (regex) path; `{name}` placeholders match like `(.*)` as in OAS paths. */
export function regexPathPattern(path: string): PatternResult {
  return anchored(path.replace(placeholder, '(.*)'));
}

/**
 * An OAS path: literal text, `{name}` segments match like `(.*)` (docs/behaviour.md#limits-and-their-scopes).
 * A brace outside a placeholder is refused rather than matched literally: `/users/{id` is a
 * typo for a placeholder far more often than a path anyone calls.
 */
export function oasPathPattern(path: string): PatternResult {
  if (!path.startsWith('/')) return { ok: false, message: `path "${path}" must start with "/"` };
  const literals = path.split(placeholder);
  if (literals.some((literal) => /[{}]/.test(literal))) {
    return { ok: false, message: `path "${path}" has a "{" or "}" that does not enclose a placeholder name such as {id}` };
  }
  return anchored(literals.map((literal) => literal.replace(regexSpecial, '\\$&')).join('(.*)'));
}

/** Whether two endpoint rules can meet the same request (method `*` meets every method). */
export function methodsOverlap(a: string, b: string): boolean {
  return a === '*' || b === '*' || a === b;
}

/**
 * Whether two path rules can match one request. Exact overlap of two regular languages is
 * beyond a config check, so this answers for what users write: the same text, or one
 * rule matching the other's literal path.
 */
export function pathsOverlap(a: { path: string; pattern: string }, b: { path: string; pattern: string }): boolean {
  return a.path === b.path || pathRegex(a.pattern).test(b.path) || pathRegex(b.pattern).test(a.path);
}
