/**
 * http-proxy 1.18.1 (its last release, 2020) calls `util._extend`, which Node 24 flags
 * with the DEP0060 deprecation warning on first use. Only that one warning code is
 * dropped; every other warning reaches process.emitWarning unchanged.
 */
const original = process.emitWarning.bind(process);

/** emitWarning(warning, type, code, ctor) or emitWarning(warning, { type, code }). */
function isDep0060(rest: unknown[]): boolean {
  const [typeOrOptions, code] = rest;
  if (code === 'DEP0060') return true;
  return typeof typeOrOptions === 'object' && typeOrOptions !== null && (typeOrOptions as { code?: unknown }).code === 'DEP0060';
}

process.emitWarning = ((warning: string | Error, ...args: unknown[]): void => {
  if (isDep0060(args)) return;
  (original as (w: string | Error, ...rest: unknown[]) => void)(warning, ...args);
}) as typeof process.emitWarning;
