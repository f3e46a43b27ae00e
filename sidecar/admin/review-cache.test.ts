import { describe, expect, it } from 'vitest';
import { REVIEW_TTL_MS, ReviewCache, tokenExpiry } from './review-cache.ts';

/** A JWT-shaped token (unsigned: the cache never checks signatures) with the given claims. */
const jwt = (claims: object): string =>
  [{ alg: 'RS256' }, claims].map((part) => Buffer.from(JSON.stringify(part)).toString('base64url')).join('.') + '.c2ln';

/** A clock the test moves, and a review that counts its calls and answers `token#n`. */
function setup(options: { maxEntries?: number } = {}) {
  const clock = { now: 1_000_000 };
  const cache = new ReviewCache<string>({ ...options, now: () => clock.now });
  const calls: string[] = [];
  const read = (token: string): Promise<string> =>
    cache.get(token, async () => {
      calls.push(token);
      return `${token}#${calls.length}`;
    });
  return { clock, cache, calls, read };
}

describe('tokenExpiry', () => {
  it('reads a numeric exp of a JWT, in ms', () => {
    expect(tokenExpiry(jwt({ exp: 1_700_000_000, sub: 'x' }))).toBe(1_700_000_000_000);
  });

  it.each([
    ['an opaque token', 'not-a-jwt-token-0123456789'],
    ['a JWT without exp', jwt({ sub: 'x' })],
    ['a JWT with a string exp', jwt({ exp: '1700000000' })],
    ['claims that are not JSON', 'a.bm90IGpzb24.c'],
    ['claims that are not an object', `a.${Buffer.from('42').toString('base64url')}.c`],
  ])('is undefined for %s', (_label, token) => {
    expect(tokenExpiry(token)).toBeUndefined();
  });
});

describe('ReviewCache', () => {
  it('reuses a review for its time to live, then asks again', async () => {
    const { clock, calls, read } = setup();
    for (let i = 0; i < 100; i++) expect(await read('token-a')).toBe('token-a#1');
    clock.now += REVIEW_TTL_MS - 1;
    expect(await read('token-a')).toBe('token-a#1');
    clock.now += 1;
    expect(await read('token-a')).toBe('token-a#2');
    expect(calls).toEqual(['token-a', 'token-a']);
  });

  it('keeps every token apart: another token is reviewed on its own', async () => {
    const { calls, read } = setup();
    expect(await read('token-a')).toBe('token-a#1');
    expect(await read('token-b')).toBe('token-b#2');
    expect(await read('token-a')).toBe('token-a#1');
    expect(calls).toEqual(['token-a', 'token-b']);
  });

  it('never keeps an answer past the token expiry, and keeps none for an expired token', async () => {
    const { clock, calls, read } = setup();
    const soon = jwt({ exp: (clock.now + 3_000) / 1000 });
    await read(soon);
    clock.now += 2_999;
    await read(soon);
    expect(calls).toHaveLength(1);
    clock.now += 1;
    await read(soon);
    await read(soon);
    expect(calls).toHaveLength(3);
  });

  it('shares one review in flight between concurrent reads', async () => {
    const { calls, read } = setup();
    const answers = await Promise.all(Array.from({ length: 50 }, () => read('token-a')));
    expect(new Set(answers)).toEqual(new Set(['token-a#1']));
    expect(calls).toHaveLength(1);
  });

  it('drops a review that failed, so the next read asks again', async () => {
    const { cache } = setup();
    let attempts = 0;
    const review = async (): Promise<string> => {
      attempts += 1;
      if (attempts === 1) throw new Error('API server unreachable');
      return 'ok';
    };
    await expect(cache.get('token-a', review)).rejects.toThrow('unreachable');
    expect(await cache.get('token-a', review)).toBe('ok');
    expect(await cache.get('token-a', review)).toBe('ok');
    expect(attempts).toBe(2);
  });

  it('holds at most maxEntries tokens, dropping expired ones first, then the oldest', async () => {
    const { clock, calls, read } = setup({ maxEntries: 3 });
    await read('old');
    clock.now += REVIEW_TTL_MS - 100;
    for (const token of ['t1', 't2']) await read(token);
    clock.now += 100;
    // Full, with 'old' expired: it makes room, t1 and t2 stay.
    await read('t3');
    for (const token of ['t1', 't2', 't3']) await read(token);
    expect(calls).toEqual(['old', 't1', 't2', 't3']);
    // Full of live entries: the oldest (t1) goes.
    await read('t4');
    await read('t2');
    await read('t1');
    expect(calls).toEqual(['old', 't1', 't2', 't3', 't4', 't1']);
  });
});
