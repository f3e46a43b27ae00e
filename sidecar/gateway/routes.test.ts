import { describe, expect, it } from 'vitest';
import type { CompiledApi } from '../../crds/compiled.ts';
import { api } from '../../test/support/compiled-fixtures.ts';
import { isIgnored, normalisePath, RouteTable } from './routes.ts';

const routedApi = (apiId: string, listenPath: string, target: string, overrides: Partial<CompiledApi> = {}): CompiledApi =>
  api(apiId, { source: { kind: 'ApiDefinition', namespace: 'ns', name: apiId }, keyless: true, listen_path: listenPath, target_url: target, ...overrides });

describe('RouteTable', () => {
  const table = new RouteTable([
    routedApi('outer', '/shop/', 'http://a:1'),
    routedApi('inner', '/shop/cart/', 'http://b:2/base/'),
    routedApi('root', '/', 'http://c:3'),
    routedApi('kept', '/keep', 'http://d:4/v1', { strip_listen_path: false }),
  ]);

  it('picks the longest listen path and keeps the query', () => {
    expect(table.match('/shop/cart/items?x=1')).toMatchObject({
      route: { api: { api_id: 'inner' }, origin: 'http://b:2' },
      relativePath: '/items',
      upstreamPath: '/base/items?x=1',
    });
    expect(table.match('/shop/other')?.route.api.api_id).toBe('outer');
  });

  it('matches whole path segments only', () => {
    expect(table.match('/shopping')?.route.api.api_id).toBe('root');
    expect(table.match('/shop')).toMatchObject({ route: { api: { api_id: 'outer' } }, relativePath: '/', upstreamPath: '/' });
  });

  it('prefixes the target path to the full path when the listen path is kept', () => {
    expect(table.match('/keep/a')?.upstreamPath).toBe('/v1/keep/a');
  });

  it('returns null when nothing listens', () => {
    expect(new RouteTable([routedApi('x', '/x/', 'http://a:1')]).match('/y')).toBeNull();
  });

  it('matches ignored endpoints by method and anchored pattern', () => {
    const route = new RouteTable([
      routedApi('i', '/i/', 'http://a:1', { ignored: [{ path: '/status/{code}', pattern: '^/status/(.*)$', method: 'GET' }, { path: '/any', pattern: '^/any$', method: '*' }] }),
    ]).match('/i/')?.route;
    if (!route) throw new Error('no route');
    expect(isIgnored(route, 'GET', '/status/200')).toBe(true);
    expect(isIgnored(route, 'POST', '/status/200')).toBe(false);
    expect(isIgnored(route, 'DELETE', '/any')).toBe(true);
    expect(isIgnored(route, 'GET', '/anything')).toBe(false);
  });

  it('resolves dot segments and repeated slashes before matching', () => {
    expect(normalisePath('/a/b')).toBe('/a/b');
    expect(normalisePath('/shop/public/../private')).toBe('/shop/private');
    expect(normalisePath('/shop/public/%2e%2e/private')).toBe('/shop/private');
    expect(normalisePath('/shop//cart/./items')).toBe('/shop/cart/items');
    expect(normalisePath('/../../etc')).toBe('/etc');
    expect(table.match('/shop/cart/../x?q=1')).toMatchObject({ route: { api: { api_id: 'outer' } }, upstreamPath: '/x?q=1' });
  });
});
