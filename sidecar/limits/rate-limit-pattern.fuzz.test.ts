import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { anyText, fuzzParameters, trickyKeys } from '../../test/support/fuzz.ts';
import { evaluatePattern, rateLimitIdentity } from './rate-limit-pattern.ts';

/**
 * `rate_limit_pattern` comes from a Policy and the metadata from a Key, both user input:
 * any pattern over any metadata evaluates without throwing, to the parts' values joined
 * by `|`, or to null (the credential is used) when a referenced field is absent or empty.
 */

const RUNS = 300;

// A part is trimmed, so a name that ends in whitespace is not one a pattern can reference.
const fieldName = fc.oneof(fc.constantFrom('org', 'team', 'user', ...trickyKeys), anyText(8)).filter((n) => !n.includes('|') && n.trimEnd() === n);
const literal = anyText(8).filter((s) => !s.includes('|') && !s.includes('$gw_meta.'));
// Finite numbers only: metadata comes from JSON or YAML.
const scalar = fc.oneof(anyText(12), fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean());
const nonScalar = fc.oneof(fc.constant(null), fc.array(fc.string(), { maxLength: 2 }), fc.dictionary(fc.string(), fc.string(), { maxKeys: 2 }));

/** A part's text as the documented rule escapes it before the join: NUL before each `|` and NUL. */
const escaped = (text: string): string => text.replace(/[\0|]/g, '\0$&');

type Part = { literal: string } | { field: string };
const parts = fc.array(fc.oneof(literal.map((l): Part => ({ literal: l })), fieldName.map((f): Part => ({ field: f }))), { minLength: 1, maxLength: 4 });
const patternOf = (ps: readonly Part[]): string => ps.map((p) => ('field' in p ? `$gw_meta.${p.field}` : p.literal)).join('|');

/** Metadata as JSON gives it: own properties only, `__proto__` included. */
const metaWith = (entries: readonly [string, unknown][]): Record<string, unknown> => JSON.parse(JSON.stringify(Object.fromEntries(entries))) as Record<string, unknown>;

describe('rate_limit_pattern expander (fuzz)', () => {
  it('never throws on any pattern and metadata, and yields a non-empty string or null', () => {
    fc.assert(
      fc.property(anyText(40), fc.dictionary(fc.oneof(fieldName, anyText(6)), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }), (pattern, meta) => {
        const value = evaluatePattern(pattern, meta);
        expect(value === null || (typeof value === 'string' && value.length > 0)).toBe(true);
      }),
      fuzzParameters(RUNS),
    );
  });

  it('with every referenced field a scalar: the escaped parts joined by |, unless one is empty', () => {
    fc.assert(
      fc.property(parts, fc.func(scalar), (ps, valueOf) => {
        const fields = ps.flatMap((p) => ('field' in p ? [p.field] : []));
        const meta = metaWith(fields.map((f) => [f, valueOf(f)]));
        const blank = fields.some((f) => meta[f] === '');
        const expected = ps.map((p) => escaped('field' in p ? String(meta[p.field]) : p.literal.trim())).join('|');
        expect(evaluatePattern(patternOf(ps), meta)).toBe(blank || expected === '' ? null : expected);
      }),
      fuzzParameters(RUNS),
    );
  });

  it('two lists of values that differ never evaluate alike, wherever their | fall', () => {
    // A small alphabet, so that a value holds a `|` (or NUL) often.
    const value = fc.oneof(fc.string({ unit: fc.constantFrom('a', '|', '\0'), minLength: 1, maxLength: 4 }), anyText(6));
    const evaluate = (values: readonly string[]): string | null =>
      evaluatePattern(values.map((_, i) => `$gw_meta.f${i}`).join('|'), Object.fromEntries(values.map((v, i) => [`f${i}`, v])));
    fc.assert(
      fc.property(fc.array(value, { minLength: 1, maxLength: 3 }), fc.array(value, { minLength: 1, maxLength: 3 }), (one, other) => {
        // The values that `one` would join to unescaped, split at every `|`: the list most like it.
        const resplit = one.join('|').split('|').filter((v) => v !== '');
        for (const two of [other, resplit]) {
          const first = evaluate(one);
          const second = evaluate(two);
          if (first === null || second === null || two.length === 0) continue;
          expect(first === second).toBe(one.length === two.length && one.every((v, i) => v === two[i]));
        }
      }),
      fuzzParameters(RUNS),
    );
  });

  it('a referenced field absent or not a scalar: the pattern does not take effect', () => {
    fc.assert(
      fc.property(parts, fc.func(scalar), fc.nat(), fc.option(nonScalar, { nil: undefined }), (ps, valueOf, which, replacement) => {
        const fields = ps.flatMap((p) => ('field' in p ? [p.field] : []));
        fc.pre(fields.length > 0);
        const spoiled = fields[which % fields.length]!;
        const entries = fields.filter((f) => f !== spoiled).map((f): [string, unknown] => [f, valueOf(f)]);
        if (replacement !== undefined) entries.push([spoiled, replacement]);
        expect(evaluatePattern(patternOf(ps), metaWith(entries))).toBeNull();
      }),
      fuzzParameters(RUNS),
    );
  });

  it('the identity is the credential or a hash: never the raw value, the same for equal values', () => {
    const keyHash = fc.stringMatching(/^[0-9a-f]{64}$/);
    fc.assert(
      fc.property(fc.option(anyText(40), { nil: null }), fc.dictionary(fieldName, scalar, { maxKeys: 3 }), keyHash, keyHash, (pattern, rawMeta, one, two) => {
        const meta = metaWith(Object.entries(rawMeta));
        const identity = rateLimitIdentity(pattern, meta, one);
        const value = pattern === null ? null : evaluatePattern(pattern, meta);
        if (value === null) {
          expect(identity).toBe(`k:${one}`);
        } else {
          expect(identity).toMatch(/^p:[0-9a-f]{64}$/);
          expect(rateLimitIdentity(pattern, meta, two)).toBe(identity);
        }
      }),
      fuzzParameters(RUNS),
    );
  });
});
