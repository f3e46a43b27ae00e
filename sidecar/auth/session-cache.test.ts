import { describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../common/session-store.ts';
import { keyHash } from '../../crds/key-hash.ts';
import { sessionSchema } from '../../crds/session.ts';
import { SessionCache } from './session-cache.ts';

class CountingStore extends MemorySessionStore {
  reads = 0;

  override getJson(keyHash: string): ReturnType<MemorySessionStore['getJson']> {
    this.reads += 1;
    return super.getJson(keyHash);
  }
}

describe('SessionCache', () => {
  it('shares one read among concurrent misses and serves repeats from memory within the TTL', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'a' }));
    const cache = new SessionCache(store, 10_000);
    const results = await Promise.all([cache.get('h'), cache.get('h'), cache.get('h')]);
    expect(results.map((s) => s?.alias)).toEqual(['a', 'a', 'a']);
    await cache.get('h');
    expect(store.reads).toBe(1);
  });

  it('hands a cached session back as it is, so the request path takes no promise for it', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'a' }));
    const cache = new SessionCache(store, 10_000);
    expect(cache.get('h')).toBeInstanceOf(Promise);
    await cache.get('h');
    const hit = cache.get('h');
    expect(hit).not.toBeInstanceOf(Promise);
    expect((hit as Awaited<typeof hit>)?.alias).toBe('a');
    expect(cache.get('unknown')).toBeInstanceOf(Promise);
  });

  it('reads again after the TTL, so changes reach the gateway quickly', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'old' }));
    const cache = new SessionCache(store, 20);
    expect((await cache.get('h'))?.alias).toBe('old');
    await store.put('h', sessionSchema.parse({ alias: 'new' }));
    await new Promise((r) => setTimeout(r, 40));
    expect((await cache.get('h'))?.alias).toBe('new');
    expect(store.reads).toBe(2);
  });

  it('keeps the session it parsed while the stored JSON stays the same, and parses a changed one', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'same' }));
    const cache = new SessionCache(store, 20);
    const first = await cache.get('h');
    // Written again with the same content: the next read finds the same JSON.
    await store.put('h', sessionSchema.parse({ alias: 'same' }));
    await new Promise((r) => setTimeout(r, 40));
    const second = await cache.get('h');
    expect(store.reads).toBe(2);
    expect(second).toBe(first);
    await store.put('h', sessionSchema.parse({ alias: 'changed' }));
    await new Promise((r) => setTimeout(r, 40));
    const third = await cache.get('h');
    expect(store.reads).toBe(3);
    expect(third).not.toBe(first);
    expect(third?.alias).toBe('changed');
    // A key deleted from the store is unknown at the next read.
    await store.delete('h');
    await new Promise((r) => setTimeout(r, 40));
    expect(await cache.get('h')).toBeNull();
  });

  it('caches unknown keys too and evicts the oldest entry past its size bound', async () => {
    const store = new CountingStore();
    const cache = new SessionCache(store, 10_000, 2);
    await cache.get('a');
    await cache.get('a');
    expect(store.reads).toBe(1);
    await cache.get('b');
    await cache.get('c');
    await cache.get('a');
    expect(store.reads).toBe(4);
  });

  describe('key hashes', () => {
    it('hashes a key it was not told of, and gives back the hash it remembered for one it was', () => {
      const cache = new SessionCache(new MemorySessionStore());
      expect(cache.keyHashOf('k1')).toBe(keyHash('k1'));
      // A stand-in hash shows the answer came from memory rather than from hashing again.
      cache.rememberKey('k1', 'remembered');
      expect(cache.keyHashOf('k1')).toBe('remembered');
      expect(cache.keyHashOf('k2')).toBe(keyHash('k2'));
    });

    it('keeps at most its size bound of keys, oldest out first, and no key longer than 256 characters', () => {
      const cache = new SessionCache(new MemorySessionStore(), 10_000, 2);
      for (const key of ['a', 'b', 'c']) cache.rememberKey(key, `remembered-${key}`);
      expect(['a', 'b', 'c'].map((key) => cache.keyHashOf(key))).toEqual([keyHash('a'), 'remembered-b', 'remembered-c']);
      const long = 'x'.repeat(257);
      cache.rememberKey(long, 'remembered-long');
      expect(cache.keyHashOf(long)).toBe(keyHash(long));
      expect(cache.keyHashOf('c')).toBe('remembered-c');
    });
  });
});
