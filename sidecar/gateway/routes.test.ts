import { describe, expect, it, vi } from 'vitest';
import type { CompiledApi } from '../../crds/compiled.ts';
import { api } from '../../test/support/compiled-fixtures.ts';
import { canonicalPath } from '../../crds/compile/request-path.ts';
import { isIgnored, RouteTable } from './routes.ts';

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

  it("sends the target URL's query before the client's, and the client's as sent without one", () => {
    const versioned = new RouteTable([routedApi('v', '/v/', 'http://a:1/base?api-version=2024-01-01&tenant=t%201')]);
    expect(versioned.match('/v/items?page=2&q=a%20b')?.upstreamPath).toBe('/base/items?api-version=2024-01-01&tenant=t%201&page=2&q=a%20b');
    expect(versioned.match('/v/items')?.upstreamPath).toBe('/base/items?api-version=2024-01-01&tenant=t%201');
    expect(versioned.match('/v/items?')?.upstreamPath).toBe('/base/items?api-version=2024-01-01&tenant=t%201');
    expect(versioned.match('/v?page=2')?.upstreamPath).toBe('/base/?api-version=2024-01-01&tenant=t%201&page=2');
    expect(table.match('/shop/x?')?.upstreamPath).toBe('/x?');
    expect(new RouteTable([routedApi('e', '/e/', 'http://a:1/base?')]).match('/e/x?a=1')?.upstreamPath).toBe('/base/x?a=1');
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
    expect(canonicalPath('/a/b')).toBe('/a/b');
    expect(canonicalPath('/shop/public/../private')).toBe('/shop/private');
    expect(canonicalPath('/shop/public/%2e%2e/private')).toBe('/shop/private');
    expect(canonicalPath('/shop//cart/./items')).toBe('/shop/cart/items');
    expect(canonicalPath('/../../etc')).toBe('/etc');
    expect(table.match('/shop/cart/../x?q=1')).toMatchObject({ route: { api: { api_id: 'outer' } }, upstreamPath: '/x?q=1' });
  });

  it('decodes escaped unreserved characters before matching, and keeps every other escape, in upper case', () => {
    expect(canonicalPath('/items/%73pecial')).toBe('/items/special');
    expect(canonicalPath('/%41-%7a%30%2D%5f%7E')).toBe('/A-z0-_~');
    expect(canonicalPath('/a%2fb/%2F/%20x/%25/%3f')).toBe('/a%2Fb/%2F/%20x/%25/%3F');
    expect(canonicalPath('/shop/%2e%2E/%2e/cart')).toBe('/cart');
    expect(canonicalPath('/bad%zz/%4')).toBe('/bad%zz/%4');
    expect(table.match('/%73hop/%63art/items?q=%73')).toMatchObject({ route: { api: { api_id: 'inner' } }, relativePath: '/items', upstreamPath: '/base/items?q=%73' });
  });
});

describe('RouteTable with many APIs', () => {
  const many = (count: number): CompiledApi[] =>
    Array.from({ length: count }, (_, i) => routedApi(`api-${String(i).padStart(4, '0')}`, `/team-${String(i).padStart(4, '0')}/svc/`, `http://up-${i % 7}:80/v1`));

  it('routes to an inactive API rather than to a shorter listen path, so it can answer as inactive', () => {
    const table = new RouteTable([routedApi('outer', '/shop/', 'http://a:1'), routedApi('closed', '/shop/cart/', 'http://b:2', { active: false })]);
    expect(table.match('/shop/cart/x')?.route.api.api_id).toBe('closed');
    expect(table.match('/shop/x')?.route.api.api_id).toBe('outer');
  });

  it('gives a listen path served twice (with or without its trailing slash) to the first API loaded', () => {
    const table = new RouteTable([routedApi('first', '/dup', 'http://a:1'), routedApi('second', '/dup/', 'http://b:2'), routedApi('third', '/dup/', 'http://c:3')]);
    expect(table.match('/dup/x')?.route.api.api_id).toBe('first');
    expect(table.origins).toEqual(new Set(['http://a:1', 'http://b:2', 'http://c:3']));
    // What the gateway reports: the APIs no request reaches, and the one served instead.
    expect(table.shadowed.map(({ api, by }) => `${api.api_id} by ${by.api_id}`)).toEqual(['second by first', 'third by first']);
    expect(new RouteTable([routedApi('first', '/dup', 'http://a:1'), routedApi('other', '/dup/more/', 'http://b:2')]).shadowed).toEqual([]);
  });

  it('serves every one of 5,000 APIs, with backslashes and dot segments resolved first', () => {
    const apis = many(5_000);
    const table = new RouteTable([...apis, routedApi('root', '/', 'http://root:1')]);
    for (const [i, api] of apis.entries()) {
      const match = table.match(`${api.listen_path}orders/${i}?q=${i}`);
      expect(match?.route.api.api_id).toBe(api.api_id);
      expect(match?.upstreamPath).toBe(`/v1/orders/${i}?q=${i}`);
    }
    expect(table.match('/team-0042/svc\\..\\..\\team-0043/svc/x')).toMatchObject({ route: { api: { api_id: 'api-0043' } }, relativePath: '/x' });
    expect(table.match('/team-0042/svcx')?.route.api.api_id).toBe('root');
    expect(table.match('/team-0042')?.route.api.api_id).toBe('root');
  });

  it('does the same lookup work with 5,000 APIs as with 10', () => {
    const lookups = (table: RouteTable, url: string): number => {
      const get = vi.spyOn(Map.prototype, 'get');
      table.match(url);
      const count = get.mock.calls.length;
      get.mockRestore();
      return count;
    };
    const small = new RouteTable(many(10));
    const large = new RouteTable(many(5_000));
    for (const url of ['/team-0003/svc/a/b/c?x=1', '/team-0003/svc', '/elsewhere/entirely', '/team-0003/svc/../svc/a']) {
      expect(large.match(url)?.route.api.api_id).toBe(small.match(url)?.route.api.api_id);
      expect(lookups(large, url)).toBe(lookups(small, url));
    }
    // Nothing is longer than the listen paths: the first probe is '/team-0003/svc' itself.
    expect(lookups(large, '/team-0003/svc/a/b/c')).toBe(1);
  });
});

describe('RouteTable after a config change', () => {
  const kept = routedApi('kept', '/kept/', 'http://a:1');
  const moved = routedApi('moved', '/moved/', 'http://b:2');
  const before = new RouteTable([kept, moved]);

  it('keeps the route of an API that did not change, and routes a changed or new one by its new definition', () => {
    const after = new RouteTable([kept, { ...moved, target_url: 'http://c:3/v2' }, routedApi('new', '/new/', 'http://d:4')], before);
    expect(after.match('/kept/x')?.route).toBe(before.match('/kept/x')?.route);
    expect(after.match('/moved/x')).toMatchObject({ route: { origin: 'http://c:3' }, upstreamPath: '/v2/x' });
    expect(before.match('/moved/x')).toMatchObject({ route: { origin: 'http://b:2' }, upstreamPath: '/x' });
    expect(after.match('/new/x')?.route.origin).toBe('http://d:4');
    expect([...after.origins].sort()).toEqual(['http://a:1', 'http://c:3', 'http://d:4']);
  });

  it('routes the same APIs in the same order as the table before it did, and in another order by the new one', () => {
    const same = new RouteTable([kept, moved], before);
    expect(same.match('/moved/x')?.route).toBe(before.match('/moved/x')?.route);
    expect(same.origins).toEqual(before.origins);
    // Of two APIs on one listen path the first wins: an order change is a change.
    const rival = routedApi('rival', '/kept/', 'http://e:5');
    const first = new RouteTable([kept, rival], before);
    expect(first.match('/kept/x')?.route.api.api_id).toBe('kept');
    expect(new RouteTable([rival, kept], first).match('/kept/x')?.route.api.api_id).toBe('rival');
  });

  it('no longer routes an API the new config left out, nor to its upstream', () => {
    const after = new RouteTable([kept], before);
    expect(after.match('/moved/x')).toBeNull();
    expect([...after.origins]).toEqual(['http://a:1']);
  });
});
