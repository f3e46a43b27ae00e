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
    const cache = new SessionCache(store, { ttlMs: 10_000 });
    const results = await Promise.all([cache.get('h'), cache.get('h'), cache.get('h')]);
    expect(results.map((s) => s?.alias)).toEqual(['a', 'a', 'a']);
    await cache.get('h');
    expect(store.reads).toBe(1);
  });

  it('hands a cached session back as it is, so the request path takes no promise for it', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'a' }));
    const cache = new SessionCache(store, { ttlMs: 10_000 });
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
    const cache = new SessionCache(store, { ttlMs: 20 });
    expect((await cache.get('h'))?.alias).toBe('old');
    await store.put('h', sessionSchema.parse({ alias: 'new' }));
    await new Promise((r) => setTimeout(r, 40));
    expect((await cache.get('h'))?.alias).toBe('new');
    expect(store.reads).toBe(2);
  });

  it('answers a failed read from the session last read only while it may serve stale ones (failing open)', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'a' }));
    let failsOpen = true;
    const cache = new SessionCache(store, { ttlMs: 10, servesStale: () => failsOpen });
    expect((await cache.get('h'))?.alias).toBe('a');
    cache.allChanged();
    store.getJson = () => Promise.reject(new Error('redis away'));
    expect((await cache.get('h'))?.alias).toBe('a');
    // A key never read has nothing to fall back on, and failing closed the error stands.
    await expect(cache.get('never-read')).rejects.toThrow('redis away');
    failsOpen = false;
    await expect(cache.get('h')).rejects.toThrow('redis away');
  });

  it('never answers a failed read from a session whose change was reported since it was read: a revoked key stays revoked', async () => {
    const store = new CountingStore();
    await store.put('revoked', sessionSchema.parse({ alias: 'revoked' }));
    await store.put('kept', sessionSchema.parse({ alias: 'kept' }));
    await store.put('racing', sessionSchema.parse({ alias: 'racing' }));
    const cache = new SessionCache(store, { ttlMs: 10, servesStale: () => true });
    cache.trackingStarted();
    await Promise.all([cache.get('revoked'), cache.get('kept')]);
    // Deleted with its Key; the report comes, the key is not sent again before the outage.
    await store.delete('revoked');
    cache.changed('revoked');
    // A read under way when its change is reported may bring what was there before it.
    const racing = cache.get('racing');
    cache.changed('racing');
    await racing;
    cache.trackingStopped();
    store.getJson = () => Promise.reject(new Error('redis away'));
    await expect(cache.get('revoked')).rejects.toThrow('redis away');
    await expect(cache.get('racing')).rejects.toThrow('redis away');
    expect((await cache.get('kept'))?.alias).toBe('kept');
  });

  it('keeps the session it parsed while the stored JSON stays the same, and parses a changed one', async () => {
    const store = new CountingStore();
    await store.put('h', sessionSchema.parse({ alias: 'same' }));
    const cache = new SessionCache(store, { ttlMs: 20 });
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
    const cache = new SessionCache(store, { ttlMs: 10_000, size: 2 });
    await cache.get('a');
    await cache.get('a');
    expect(store.reads).toBe(1);
    await cache.get('b');
    await cache.get('c');
    await cache.get('a');
    expect(store.reads).toBe(4);
  });

  it('keeps unknown keys within a bound of their own, so a flood of them cannot push a known key out', async () => {
    const store = new CountingStore();
    await store.put('known', sessionSchema.parse({ alias: 'known' }));
    const cache = new SessionCache(store, { ttlMs: 10_000, size: 2 });
    await cache.get('known');
    for (let i = 0; i < 5; i++) expect(await cache.get(`bad-${i}`)).toBeNull();
    expect(store.reads).toBe(6);
    expect((await cache.get('known'))?.alias).toBe('known');
    // The last two unknown keys are still cached; the first is out.
    await Promise.all([cache.get('bad-3'), cache.get('bad-4')]);
    expect(store.reads).toBe(6);
    await cache.get('bad-0');
    expect(store.reads).toBe(7);
  });

  describe('while changes are tracked', () => {
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

    /** A store holding a session per alias (keyed by the alias), and a cache tracking its changes: 20 ms untracked, 10 s tracked. */
    async function tracked(aliases: string[], trackedTtlMs = 10_000): Promise<{ store: CountingStore; cache: SessionCache }> {
      const store = new CountingStore();
      for (const alias of aliases) await store.put(alias, sessionSchema.parse({ alias }));
      const cache = new SessionCache(store, { ttlMs: 20, size: 100, trackedTtlMs });
      cache.trackingStarted();
      return { store, cache };
    }

    it('keeps a session past the short TTL until its change is reported, then reads it again', async () => {
      const { store, cache } = await tracked(['h', 'other']);
      expect((await cache.get('h'))?.alias).toBe('h');
      await cache.get('other');
      await store.put('h', sessionSchema.parse({ alias: 'new' }));
      await sleep(40);
      // Past the short TTL, and no change reported: still the session read first, without a read.
      expect((await cache.get('h'))?.alias).toBe('h');
      expect(store.reads).toBe(2);
      cache.changed('h');
      expect((await cache.get('h'))?.alias).toBe('new');
      expect((await cache.get('other'))?.alias).toBe('other');
      expect(store.reads).toBe(3);
    });

    it('keeps what a read under way brings for the short TTL only when its key changed meanwhile', async () => {
      const { store, cache } = await tracked(['h']);
      // The report of a change may arrive before the answer of a read that was served before it.
      const reading = cache.get('h');
      cache.changed('h');
      expect((await reading)?.alias).toBe('h');
      await sleep(40);
      await cache.get('h');
      expect(store.reads).toBe(2);
      // The read after it began with no change reported since: it stays.
      await sleep(40);
      await cache.get('h');
      expect(store.reads).toBe(2);
    });

    it('keeps an untracked answer for the short TTL only, and still falls back on it in an outage: no change was reported', async () => {
      const { store, cache } = await tracked(['h']);
      // A Cluster master refused the tracked read (MOVED, CLUSTERDOWN): the answer came from elsewhere.
      const reading = cache.get('h');
      cache.untracked('h');
      expect((await reading)?.alias).toBe('h');
      await sleep(40);
      await cache.get('h');
      expect(store.reads).toBe(2);
      const failsOpen = new SessionCache(store, { ttlMs: 10, servesStale: () => true });
      failsOpen.trackingStarted();
      const read = failsOpen.get('h');
      failsOpen.untracked('h');
      await read;
      failsOpen.allChanged();
      store.getJson = () => Promise.reject(new Error('redis away'));
      expect((await failsOpen.get('h'))?.alias).toBe('h');
    });

    it('answers a key the store lost from its stand-in, for the short TTL only: no report will say it is gone', async () => {
      const store = new CountingStore();
      let standIn: string | null = JSON.stringify(sessionSchema.parse({ alias: 'folder' }));
      const cache = new SessionCache(store, { ttlMs: 20, trackedTtlMs: 10_000, absent: () => standIn });
      cache.trackingStarted();
      expect((await cache.get('lost'))?.alias).toBe('folder');
      standIn = null;
      await sleep(40);
      expect(await cache.get('lost')).toBeNull();
      expect(store.reads).toBe(2);
    });

    it('reads every session again when the store was flushed, and keeps tracking', async () => {
      const { store, cache } = await tracked(['a']);
      await Promise.all([cache.get('a'), cache.get('b')]);
      await store.delete('a');
      cache.allChanged();
      expect(await cache.get('a')).toBeNull();
      await cache.get('b');
      expect(store.reads).toBe(4);
      await sleep(40);
      await Promise.all([cache.get('a'), cache.get('b')]);
      expect(store.reads).toBe(4);
    });

    it('forgets every entry when reports may be lost, and keeps what it reads then for the short TTL only', async () => {
      const { store, cache } = await tracked(['h']);
      await cache.get('h');
      await store.put('h', sessionSchema.parse({ alias: 'new' }));
      const reading = cache.get('other');
      cache.trackingStopped();
      await reading;
      expect((await cache.get('h'))?.alias).toBe('new');
      expect(store.reads).toBe(3);
      await cache.get('other');
      expect(store.reads).toBe(3);
      await sleep(40);
      await Promise.all([cache.get('h'), cache.get('other')]);
      expect(store.reads).toBe(5);
    });

    it('bounds a tracked session\'s life by its own TTL, in case a report was lost without a sign', async () => {
      const { store, cache } = await tracked(['h'], 30);
      await cache.get('h');
      await store.put('h', sessionSchema.parse({ alias: 'new' }));
      await sleep(60);
      expect((await cache.get('h'))?.alias).toBe('new');
    });
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
      const cache = new SessionCache(new MemorySessionStore(), { ttlMs: 10_000, size: 2 });
      for (const key of ['a', 'b', 'c']) cache.rememberKey(key, `remembered-${key}`);
      expect(['a', 'b', 'c'].map((key) => cache.keyHashOf(key))).toEqual([keyHash('a'), 'remembered-b', 'remembered-c']);
      const long = 'x'.repeat(257);
      cache.rememberKey(long, 'remembered-long');
      expect(cache.keyHashOf(long)).toBe(keyHash(long));
      expect(cache.keyHashOf('c')).toBe('remembered-c');
    });
  });
});
