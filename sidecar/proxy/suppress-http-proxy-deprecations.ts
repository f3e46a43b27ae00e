/**
 * http-proxy 1.18.1 (its last release, 2020) calls two APIs Node 24 flags with a deprecation
 * warning on first use: `util._extend` (DEP0060) and `url.parse` (DEP0169), the latter on the
 * request path it is given and on the configured target, never on a client's Host or an
 * upstream's Location (the gateway sets none of its rewrite options). Without this, the first
 * request through it (or the first WebSocket upgrade, which it always carries) prints both in
 * the sidecar's log. Only those two codes are dropped; every other warning reaches
 * process.emitWarning unchanged.
 */
const original = process.emitWarning.bind(process);

const dropped = new Set(['DEP0060', 'DEP0169']);

/** emitWarning(warning, type, code, ctor) or emitWarning(warning, { type, code }). */
function isDropped(rest: unknown[]): boolean {
  const [typeOrOptions, code] = rest;
  if (typeof code === 'string') return dropped.has(code);
  const optionsCode = typeof typeOrOptions === 'object' && typeOrOptions !== null ? (typeOrOptions as { code?: unknown }).code : undefined;
  return typeof optionsCode === 'string' && dropped.has(optionsCode);
}

process.emitWarning = ((warning: string | Error, ...args: unknown[]): void => {
  if (isDropped(args)) return;
  (original as (w: string | Error, ...rest: unknown[]) => void)(warning, ...args);
}) as typeof process.emitWarning;
