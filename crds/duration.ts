/**
 * Strict duration strings in Go's `time.ParseDuration` syntax ("10s", "1m30s", "250ms"),
 * the format of OAS `rateLimit.per` and of a stream resource's `local.interval`.
 * Unlike Go, signs and bare numbers are refused: a window is never negative and "10"
 * has no unit a user could mean unambiguously.
 */

const unitMs: Readonly<Record<string, number>> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
};

/** Pattern for the CRD schema; the same language RE2 (the API server) and JS accept. */
export const durationPattern = '^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$';

/** `durationPattern` compiled once, for every check of a duration's syntax. */
export const durationRegex = new RegExp(durationPattern);
const partRegex = /([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)/g;

/** The longest window accepted: one year, far beyond any sensible rate-limit window. */
export const maxDurationMs = 365 * 24 * 3_600_000;

export type DurationResult = { ok: true; ms: number } | { ok: false; message: string };

export function parseDuration(text: string): DurationResult {
  if (!durationRegex.test(text)) {
    return {
      ok: false,
      message: `"${text}" is not a duration: use a number and a unit (ns, us, ms, s, m, h), e.g. "10s" or "1m30s"`,
    };
  }
  const ms = durationMs(text);
  if (ms > maxDurationMs) return { ok: false, message: `"${text}" is longer than the maximum of 8760h` };
  return { ok: true, ms };
}

/**
 * The length in ms of a text that is a duration: the compile step reads only such text, since
 * the schemas refuse any other (and a window out of bounds) before it compiles a spec.
 */
export function durationMs(text: string): number {
  let ms = 0;
  for (const [, amount, unit] of text.matchAll(partRegex)) {
    ms += Number(amount) * (unitMs[unit as string] as number);
  }
  return ms;
}
