import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { evaluatePattern, rateLimitIdentity } from './rate-limit-pattern.ts';

const sha = (value: string): string => createHash('sha256').update(value).digest('hex');

describe('evaluatePattern', () => {
  it.each([
    ['$gw_meta.user', { user: 'alice' }, 'alice'],
    ['$gw_meta.org|$gw_meta.user', { org: 'acme', user: 'bob' }, 'acme|bob'],
    ['$gw_meta.ip', { ip: '10.0.0.1', other: 'x' }, '10.0.0.1'],
    ['$gw_meta.tier|$gw_meta.n', { tier: 'gold', n: 7 }, 'gold|7'],
    ['static', {}, 'static'],
    ['$gw_meta.user', {}, null],
    ['$gw_meta.org|$gw_meta.user', { org: 'acme' }, null],
    ['$gw_meta.user', { user: '' }, null],
    ['$gw_meta.org|$gw_meta.team', { org: '', team: '' }, null],
    ['$gw_meta.org|$gw_meta.team', { org: 'acme', team: '' }, null],
    ['org-$gw_meta.org', { org: '' }, null],
    ['$gw_meta.user', { user: { nested: true } }, null],
    ['$gw_meta.user', { user: null }, null],
    ['', {}, null],
    ['org-$gw_meta.org', { org: 'x' }, 'org-x'],
    ['org-$gw_meta.org', {}, null],
    ['t:$gw_meta.tier/$gw_meta.n|$gw_meta.user', { tier: 'gold', n: 7, user: 'al' }, 't:gold/7|al'],
    // A `|` or NUL inside a value is escaped (NUL before it): no two lists of values join alike.
    ['$gw_meta.org|$gw_meta.team', { org: 'a|b', team: 'c' }, 'a\0|b|c'],
    ['$gw_meta.org|$gw_meta.team', { org: 'a', team: 'b|c' }, 'a|b\0|c'],
    ['org-$gw_meta.org|x', { org: 'y|z' }, 'org-y\0|z|x'],
    ['$gw_meta.org', { org: 'a\0' }, 'a\0\0'],
    ['$gw_meta.toString', {}, null],
    ['x$gw_meta.constructor', {}, null],
    // Whitespace around a `|` is layout, not part of a field's name or of the text.
    ['$gw_meta.org | $gw_meta.team', { org: 'acme', team: 'red' }, 'acme|red'],
    [' org-$gw_meta.org |x ', { org: 'acme' }, 'org-acme|x'],
  ])('%s with %j -> %s', (pattern, meta, expected) => {
    expect(evaluatePattern(pattern, meta)).toBe(expected);
  });
});

describe('rateLimitIdentity', () => {
  const keyHash = 'a'.repeat(64);

  it('uses the hashed pattern value when the pattern takes effect', () => {
    expect(rateLimitIdentity('$gw_meta.user', { user: 'alice' }, keyHash)).toBe(`p:${sha('alice')}`);
  });

  it('falls back to the credential without a pattern, on missing metadata and on a blank value', () => {
    expect(rateLimitIdentity(null, { user: 'alice' }, keyHash)).toBe(`k:${keyHash}`);
    expect(rateLimitIdentity('$gw_meta.user', {}, keyHash)).toBe(`k:${keyHash}`);
    expect(rateLimitIdentity('$gw_meta.user', { user: '' }, keyHash)).toBe(`k:${keyHash}`);
    // Only whitespace is blank too: two keys with `team: " "` would share one allowance.
    for (const blank of [' ', '\t', ' \n ']) expect(rateLimitIdentity('$gw_meta.org|$gw_meta.team', { org: 'acme', team: blank }, keyHash)).toBe(`k:${keyHash}`);
    // Text around a value is the value's: ` x ` is kept as it is.
    expect(rateLimitIdentity('$gw_meta.user', { user: ' x ' }, keyHash)).toBe(`p:${sha(' x ')}`);
  });

  it('keys whose values differ only in where a | falls do not share an identity; values without one keep theirs', () => {
    const pattern = '$gw_meta.org|$gw_meta.team';
    const one = rateLimitIdentity(pattern, { org: 'a|b', team: 'c' }, keyHash);
    const two = rateLimitIdentity(pattern, { org: 'a', team: 'b|c' }, keyHash);
    expect(one).not.toBe(two);
    // The identity of a value with neither `|` nor NUL is what it was before values were escaped.
    expect(rateLimitIdentity(pattern, { org: 'acme', team: 'red' }, keyHash)).toBe(`p:${sha('acme|red')}`);
  });

  it('two keys with the same metadata share an identity', () => {
    const one = rateLimitIdentity('$gw_meta.org', { org: 'acme' }, 'a'.repeat(64));
    const two = rateLimitIdentity('$gw_meta.org', { org: 'acme' }, 'b'.repeat(64));
    expect(one).toBe(two);
    expect(one).not.toContain('acme');
  });
});
