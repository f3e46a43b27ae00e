import { describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../common/session-store.ts';
import { keyHash } from '../../crds/key-hash.ts';
import { sessionSchema } from '../../crds/session.ts';
import { gatewayErrors } from '../http/errors.ts';
import { authenticate, extractKey, accessRefusal } from './authenticator.ts';
import { SessionCache } from './session-cache.ts';

const grant = { api1: { api_id: 'api1' } };

describe('extractKey', () => {
  it('reads the raw key or the Bearer form, and nothing from empty values', () => {
    expect(extractKey({ authorization: 'abc' }, 'authorization')).toBe('abc');
    expect(extractKey({ authorization: 'Bearer abc' }, 'authorization')).toBe('abc');
    expect(extractKey({ 'x-key': 'bearer   abc ' }, 'x-key')).toBe('abc');
    expect(extractKey({ authorization: 'Bearer ' }, 'authorization')).toBeNull();
    expect(extractKey({}, 'authorization')).toBeNull();
  });
});

describe('accessRefusal', () => {
  const policies = {
    'team/gold': { access_rights: { api2: {} } },
  } as unknown as Parameters<typeof accessRefusal>[2];
  const now = 1_800_000_000;

  it('grants by access rights or by an applied policy of the key namespace', () => {
    expect(accessRefusal(sessionSchema.parse({ access_rights: grant }), 'api1', {}, now)).toBeNull();
    expect(accessRefusal(sessionSchema.parse({ apply_policies: ['gold'], namespace: 'team' }), 'api2', policies, now)).toBeNull();
    expect(accessRefusal(sessionSchema.parse({ apply_policies: ['gold'], namespace: 'other' }), 'api2', policies, now)).toBe('not_granted');
    expect(accessRefusal(sessionSchema.parse({}), 'api1', {}, now)).toBe('not_granted');
  });

  it('refuses inactive and expired keys; expires 0 never expires', () => {
    expect(accessRefusal(sessionSchema.parse({ access_rights: grant, is_inactive: true }), 'api1', {}, now)).toBe('inactive');
    expect(accessRefusal(sessionSchema.parse({ access_rights: grant, expires: now - 1 }), 'api1', {}, now)).toBe('expired');
    expect(accessRefusal(sessionSchema.parse({ access_rights: grant, expires: now + 60 }), 'api1', {}, now)).toBeNull();
    expect(accessRefusal(sessionSchema.parse({ access_rights: grant, expires: 0 }), 'api1', {}, now)).toBeNull();
  });
});

describe('authenticate', () => {
  it('401 without a key, 403 for an unknown one, the session for a good one', async () => {
    const store = new MemorySessionStore();
    await store.put(keyHash('good'), sessionSchema.parse({ access_rights: grant }));
    const cache = new SessionCache(store);
    expect(await authenticate({}, 'authorization', 'api1', {}, cache)).toEqual({ ok: false, error: gatewayErrors.authMissing });
    expect(await authenticate({ authorization: 'bad' }, 'authorization', 'api1', {}, cache)).toEqual({ ok: false, error: gatewayErrors.accessDenied });
    expect(await authenticate({ authorization: 'good' }, 'authorization', 'api1', {}, cache)).toMatchObject({ ok: true, keyHash: keyHash('good') });
  });

  it('answers a key whose session is cached at once, with the same result', async () => {
    const store = new MemorySessionStore();
    await store.put(keyHash('good'), sessionSchema.parse({ access_rights: grant }));
    const cache = new SessionCache(store, { ttlMs: 10_000 });
    const first = authenticate({ authorization: 'good' }, 'authorization', 'api1', {}, cache);
    expect(first).toBeInstanceOf(Promise);
    expect(await first).toMatchObject({ ok: true, keyHash: keyHash('good') });
    const cached = authenticate({ authorization: 'good' }, 'authorization', 'api1', {}, cache);
    expect(cached).not.toBeInstanceOf(Promise);
    expect(cached).toMatchObject({ ok: true, keyHash: keyHash('good') });
    await authenticate({ authorization: 'bad' }, 'authorization', 'api1', {}, cache);
    expect(authenticate({ authorization: 'bad' }, 'authorization', 'api1', {}, cache)).toEqual({ ok: false, error: gatewayErrors.accessDenied });
  });

  it('remembers the hash of a key whose session was found, and of no other key', async () => {
    const store = new MemorySessionStore();
    await store.put(keyHash('good'), sessionSchema.parse({ access_rights: grant }));
    await store.put(keyHash('elsewhere'), sessionSchema.parse({ access_rights: { api2: { api_id: 'api2' } } }));
    const cache = new SessionCache(store, { ttlMs: 10_000 });
    for (const key of ['good', 'elsewhere', 'bad']) await authenticate({ authorization: key }, 'authorization', 'api1', {}, cache);
    // Telling the cache a stand-in hash changes only what it had not remembered yet.
    for (const key of ['good', 'elsewhere', 'bad']) cache.rememberKey(key, `stand-in-${key}`);
    // A found key is remembered even where it may not call the API: the hash is the key's, whatever it may call.
    expect(['good', 'elsewhere', 'bad'].map((key) => cache.keyHashOf(key))).toEqual([keyHash('good'), keyHash('elsewhere'), 'stand-in-bad']);
  });

  it.each([
    ['rejects', () => Promise.reject(new Error('down'))],
    ['throws', () => {
      throw new Error('down');
    }],
  ])('503 when the session store %s', async (_how, get) => {
    const failing = { get, getJson: get, put: async () => '', delete: async () => undefined };
    const result = await authenticate({ authorization: 'k' }, 'authorization', 'api1', {}, new SessionCache(failing));
    expect(result).toEqual({ ok: false, error: gatewayErrors.sessionStoreUnavailable });
  });
});
