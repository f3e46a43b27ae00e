import { linearTimeRefusal, pathRegex } from './path-regex.ts';
import { canonicalText, neverMatchedText } from './request-path.ts';

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

/**
 * A classic (regex) path; `{name}` placeholders match like `(.*)` as in OAS paths. A regular
 * expression cannot be brought to the form requests are matched in, so text that no request
 * path holds in that form is refused, with what to write. A refusal's message names the path.
 */
export function regexPathPattern(path: string): PatternResult {
  const never = neverMatchedText(path);
  if (never !== null) {
    return { ok: false, message: `path "${path}" holds ${JSON.stringify(never.found)}, which no request path holds as the gateway matches it (docs/behaviour.md#endpoint-paths): write ${JSON.stringify(never.write)}` };
  }
  const compiled = anchored(path.replace(placeholder, '(.*)'));
  return compiled.ok ? compiled : { ok: false, message: `path "${path}" is not a valid regular expression: ${compiled.message}` };
}

/**
 * An OAS path: literal text, in the form requests are matched in (`/café` is `/caf%C3%A9`),
 * `{name}` segments match like `(.*)` (docs/behaviour.md#limits-and-their-scopes).
 * A brace outside a placeholder is refused rather than matched literally: `/users/{id` is a
 * typo for a placeholder far more often than a path anyone calls.
 */
export function oasPathPattern(path: string): PatternResult {
  if (!path.startsWith('/')) return { ok: false, message: `path "${path}" must start with "/"` };
  const literals = path.split(placeholder);
  if (literals.some((literal) => /[{}]/.test(literal))) {
    return { ok: false, message: `path "${path}" has a "{" or "}" that does not enclose a placeholder name such as {id}` };
  }
  return anchored(literals.map((literal) => canonicalText(literal).replace(regexSpecial, '\\$&')).join('(.*)'));
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
