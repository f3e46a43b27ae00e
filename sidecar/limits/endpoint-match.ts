import type { CompiledEndpointLimit } from '../../crds/compiled.ts';
import { pathRegex } from '../../crds/compile/path-regex.ts';

export interface EndpointMatcher<T> {
  method: string;
  regex: RegExp;
  value: T;
}

/** Regexes are compiled once per config; patterns come anchored from the compile step. */
export function compileEndpoints(limits: readonly CompiledEndpointLimit[]): EndpointMatcher<CompiledEndpointLimit>[] {
  return limits.map((limit) => ({ method: limit.method.toUpperCase(), regex: pathRegex(limit.pattern), value: limit }));
}

/** First match in evaluation order (docs/behaviour.md#limits-and-their-scopes). */
export function firstMatch<T>(matchers: readonly EndpointMatcher<T>[], method: string, path: string): T | null {
  for (const matcher of matchers) {
    if ((matcher.method === '*' || matcher.method === method) && matcher.regex.test(path)) return matcher.value;
  }
  return null;
}
