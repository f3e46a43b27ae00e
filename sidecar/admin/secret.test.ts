import { describe, expect, it } from 'vitest';
import { StaticBearerAuthenticator } from './bearer.ts';
import { secretMatches } from './secret.ts';

describe('secretMatches', () => {
  it('matches only the exact secret', () => {
    expect(secretMatches('s3cret-value', 's3cret-value')).toBe(true);
    expect(secretMatches('s3cret-valuE', 's3cret-value')).toBe(false);
    expect(secretMatches('s3cret', 's3cret-value')).toBe(false);
    expect(secretMatches('s3cret-value-longer', 's3cret-value')).toBe(false);
    expect(secretMatches(undefined, 's3cret-value')).toBe(false);
  });

  it('never opens an operation whose secret is unset', () => {
    expect(secretMatches('', '')).toBe(false);
    expect(secretMatches('anything', '')).toBe(false);
  });
});

describe('StaticBearerAuthenticator', () => {
  const auth = new StaticBearerAuthenticator([
    { name: 'reader', token: 'reader-token-0123456789', permissions: ['get:apidefinitions'] },
    { name: 'admin', token: 'admin-token-0123456789', permissions: ['*'] },
  ]);

  it('authenticates known tokens only', async () => {
    expect(await auth.authenticate('nope-0123456789abcdef')).toBeNull();
    expect((await auth.authenticate('reader-token-0123456789'))?.name).toBe('reader');
  });

  it('grants exactly the listed permissions', async () => {
    const reader = (await auth.authenticate('reader-token-0123456789'))!;
    expect(await reader.can({ verb: 'get', resource: 'apidefinitions', namespace: 'a' })).toBe(true);
    expect(await reader.can({ verb: 'list', resource: 'apidefinitions' })).toBe(false);
    expect(await reader.can({ verb: 'list', resource: 'categories' })).toBe(false);
    const admin = (await auth.authenticate('admin-token-0123456789'))!;
    expect(await admin.can({ verb: 'list', resource: 'categories' })).toBe(true);
  });
});
