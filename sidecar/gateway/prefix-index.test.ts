import { afterEach, describe, expect, it, vi } from 'vitest';
import { PrefixIndex } from './prefix-index.ts';

/** The linear scan the index replaced: longest prefix first (stable, so the first of equals wins). */
function scan<T>(entries: readonly (readonly [string, T])[], path: string): T | undefined {
  const byLength = [...entries].sort((a, b) => b[0].length - a[0].length);
  for (const [prefix, value] of byLength) {
    if (path.startsWith(prefix) && (path.length === prefix.length || path[prefix.length] === '/')) return value;
  }
  return undefined;
}

/** Deterministic pseudo-random numbers (mulberry32), so a failing case can be replayed. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Short strings over few characters, so prefixes, slashes and near-misses collide often. */
function randomPath(next: () => number, alphabet: string, maxLength: number): string {
  let path = '';
  const length = Math.floor(next() * (maxLength + 1));
  for (let i = 0; i < length; i++) path += alphabet[Math.floor(next() * alphabet.length)];
  return path;
}

const index = (...prefixes: string[]): PrefixIndex<string> => new PrefixIndex(prefixes.map((p) => [p, p] as const));

describe('PrefixIndex', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('finds the longest prefix that ends at a segment boundary', () => {
    const found = index('/a', '/a/b', '/a/b/c/d');
    expect(found.find('/a/b/c')).toBe('/a/b');
    expect(found.find('/a/b')).toBe('/a/b');
    expect(found.find('/a/bc')).toBe('/a');
    expect(found.find('/a/')).toBe('/a');
    expect(found.find('/ab')).toBeUndefined();
    expect(found.find('/a/b/c/d/e')).toBe('/a/b/c/d');
  });

  it('lets the root prefix match every path that starts with a slash, and nothing else', () => {
    const found = index('', '/x');
    expect(found.find('/')).toBe('');
    expect(found.find('/y/z')).toBe('');
    expect(found.find('/x/z')).toBe('/x');
    expect(found.find('')).toBe('');
    expect(found.find('*')).toBeUndefined();
    expect(found.find('x/y')).toBeUndefined();
  });

  it('matches a prefix ending in a slash only where the path has one more slash or ends', () => {
    const found = index('/a/', '/b');
    expect(found.find('/a/')).toBe('/a/');
    expect(found.find('/a//x')).toBe('/a/');
    expect(found.find('/a/x')).toBeUndefined();
    expect(found.find('/a')).toBeUndefined();
  });

  it('keeps the first value given for a prefix', () => {
    const found = new PrefixIndex([['/a', 'first'], ['/a', 'second'], ['/a/b', 'third']] as const);
    expect(found.find('/a/c')).toBe('first');
    expect(found.find('/a/b/c')).toBe('third');
  });

  it('finds nothing in an empty index', () => {
    expect(index().find('/')).toBeUndefined();
    expect(index().find('')).toBeUndefined();
  });

  it('does not probe parts of the path longer than the longest prefix', () => {
    const get = vi.spyOn(Map.prototype, 'get');
    expect(index('/a').find('/a/b/c/d/e/f/g/h')).toBe('/a');
    expect(get).toHaveBeenCalledTimes(1);
  });

  it('answers exactly as the longest-first scan on random prefixes and paths', () => {
    const next = random(16);
    for (let round = 0; round < 300; round++) {
      const entries = Array.from({ length: 1 + Math.floor(next() * 12) }, (_, i) => {
        const prefix = next() < 0.1 ? '' : `/${randomPath(next, 'ab/', 6)}`;
        return [prefix, `${prefix}#${i}`] as const;
      });
      const found = new PrefixIndex(entries);
      for (let probe = 0; probe < 40; probe++) {
        const path = next() < 0.05 ? randomPath(next, 'ab/', 6) : `/${randomPath(next, 'ab/', 9)}`;
        expect(found.find(path), `${JSON.stringify(entries)} ${path}`).toBe(scan(entries, path));
      }
    }
  });

  it('does the same work for a path whatever the number of prefixes', () => {
    // Same-length names in both, so the longest prefix (which bounds the probes) is the same.
    const prefixes = (count: number): string[] => Array.from({ length: count }, (_, i) => `/team-${String(i).padStart(4, '0')}/svc`);
    const probes = (found: PrefixIndex<string>, path: string): number => {
      const get = vi.spyOn(Map.prototype, 'get');
      found.find(path);
      const count = get.mock.calls.length;
      get.mockRestore();
      return count;
    };
    const small = index(...prefixes(10), '/');
    const large = index(...prefixes(5_000), '/');
    for (const path of ['/team-0007/svc/orders/42', '/nobody/home/at/all', '/team-0007/svcx', '/']) {
      expect(large.find(path)).toBe(small.find(path));
      expect(probes(large, path)).toBe(probes(small, path));
      // At most one probe per slash of the path, plus the whole path.
      expect(probes(large, path)).toBeLessThanOrEqual(path.split('/').length);
    }
  });
});
