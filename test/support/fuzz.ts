import fc from 'fast-check';

/**
 * Settings every fuzz suite shares. `npm test` runs each property with one fixed seed and a
 * modest number of runs, so a run is fast and a failure replays exactly; FUZZ_RUNS runs
 * every property that many times (longer hunts), FUZZ_SEED starts from another seed.
 * fast-check prints the seed and the shrunk counterexample of a failure.
 */

const DEFAULT_SEED = 140_425;

function positiveInteger(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return value;
}

/** Runs of one property: FUZZ_RUNS when set, else the suite's own (small) default. */
export function fuzzRuns(defaultRuns: number): number {
  return positiveInteger('FUZZ_RUNS', process.env.FUZZ_RUNS) ?? defaultRuns;
}

export const fuzzSeed = (): number => positiveInteger('FUZZ_SEED', process.env.FUZZ_SEED) ?? DEFAULT_SEED;

export function fuzzParameters<T>(defaultRuns: number): fc.Parameters<T> {
  return { seed: fuzzSeed(), numRuns: fuzzRuns(defaultRuns) };
}

/**
 * Vitest's timeout for a property test: room for FUZZ_RUNS when it asks for more runs than
 * the default, at the per-run cost the suite measured.
 */
export function fuzzTimeout(defaultRuns: number, msPerRun: number, floorMs = 30_000): number {
  return Math.max(floorMs, fuzzRuns(defaultRuns) * msPerRun * 3);
}

/** Object keys that bite code which indexes plain objects by user input. */
export const trickyKeys = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', ''] as const;

/** Characters that matter to regular expressions, YAML, paths and URLs, mixed with any text. */
const specialChars = [...'()[]{}*+?.\\/|^$#:-&!%@`\'"<>,=~ \t\n\r'];

/** Any text, biased towards the characters and words parsers treat specially. */
export function anyText(maxLength = 24): fc.Arbitrary<string> {
  return fc.oneof(
    fc.string({ maxLength }),
    fc.string({ unit: fc.constantFrom(...specialChars, 'a', '0', 'é', '\u0000', '\u{1F600}'), maxLength }),
    fc.string({ unit: 'grapheme', maxLength }),
    fc.constantFrom(...trickyKeys, 'null', 'true', '~', '0x1F', '1e3', '- item', 'a: b', '---', '%2F', '..', '*'),
  );
}
