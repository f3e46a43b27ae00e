import { setFlagsFromString } from 'node:v8';

/**
 * The regular expressions users write for paths (classic endpoint limits, ignored paths,
 * key-level endpoint limits) run on every request, on the event loop: one that backtracks
 * without end (`/(a+)+$` against `/aaaa…!`) would stop every API of the gateway, and at compile
 * time the operator. So a path pattern must be one V8's linear-time engine can run, and a
 * match falls back to that engine once it has backtracked too far: common patterns keep the
 * backtracking engine's speed, and no pattern takes more than linear time
 * (docs/behaviour.md#endpoint-paths). Node reads neither flag from NODE_OPTIONS, so they are
 * set here, before any path pattern is compiled; they change no other expression's result.
 */
setFlagsFromString('--enable-experimental-regexp-engine');
setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

/** Why a pattern that compiles cannot be run in linear time; null when it can. */
export function linearTimeRefusal(pattern: string): string | null {
  try {
    // eslint-disable-next-line no-invalid-regexp -- `l` is V8's linear-time engine, enabled above.
    new RegExp(pattern, 'l');
    return null;
  } catch {
    return 'it could take exponential time to match: backreferences, lookaheads and counted repetitions over 16 (such as {1,20}; write + instead) are refused';
  }
}

/** A compiled path pattern (anchored by the compile step), matched with the fallback above. */
export const pathRegex = (pattern: string): RegExp => new RegExp(pattern);
