import { describe, expect, it } from 'vitest';
import { matchRoute, pathOf } from './router.ts';
import { adminRoutes } from './routes.ts';

describe('pathOf', () => {
  it.each([
    ['/gw/reload?block=true', '/gw/reload'],
    ['/gw/apis/a#frag', '/gw/apis/a'],
    ['/gw/apis/../x', '/gw/apis/../x'],
    ['/gw/apis/a%2Fb', '/gw/apis/a%2Fb'],
  ])('%s → %s (no normalisation, no decoding)', (url, path) => {
    expect(pathOf(url)).toBe(path);
  });

  it('refuses absolute-form and empty targets', () => {
    expect(pathOf('http://host/gw/reload')).toBeNull();
    expect(pathOf(undefined)).toBeNull();
  });
});

describe('matchRoute', () => {
  it('captures raw parameters', () => {
    const match = matchRoute(adminRoutes, 'POST', '/portal-api/products/p%201/tags');
    expect(match.kind).toBe('found');
    if (match.kind === 'found') {
      expect(match.route.operation).toBe('add_product_tag');
      expect(match.params).toEqual({ product_id: 'p%201' });
    }
  });

  it('tells the one-API and all-categories reads apart', () => {
    const one = matchRoute(adminRoutes, 'GET', '/api/apis/oas/categories/categories');
    const all = matchRoute(adminRoutes, 'GET', '/api/apis/categories');
    expect(one.kind === 'found' && one.route.operation).toBe('api_categories');
    expect(all.kind === 'found' && all.route.operation).toBe('all_categories');
  });

  it('reports the allowed methods of a known path, HEAD beside GET', () => {
    expect(matchRoute(adminRoutes, 'GET', '/gw/apis/x')).toEqual({ kind: 'wrong-method', allow: ['DELETE'] });
    expect(matchRoute(adminRoutes, 'PUT', '/admin/org/keys')).toEqual({ kind: 'wrong-method', allow: ['POST'] });
    expect(matchRoute(adminRoutes, 'POST', '/api/apis/categories')).toEqual({ kind: 'wrong-method', allow: ['GET', 'HEAD'] });
    // The reload acts on a GET: HEAD, a safe method, is not answered as it.
    expect(matchRoute(adminRoutes, 'POST', '/gw/reload')).toEqual({ kind: 'wrong-method', allow: ['GET'] });
    expect(matchRoute(adminRoutes, 'HEAD', '/gw/reload')).toEqual({ kind: 'wrong-method', allow: ['GET'] });
  });

  it.each(['/gw/gateways', '/api/apis/categories', '/gw/keys/abc/limits'])('answers HEAD %s with its GET route', (path) => {
    const get = matchRoute(adminRoutes, 'GET', path);
    expect(get.kind).toBe('found');
    expect(matchRoute(adminRoutes, 'HEAD', path)).toEqual(get);
  });

  it('answers HEAD with no route that only takes other methods', () => {
    expect(matchRoute(adminRoutes, 'HEAD', '/gw/apis/x')).toEqual({ kind: 'wrong-method', allow: ['DELETE'] });
  });

  it.each(['/gw/apis/../x', '/gw/apis', '/admin/org/keys/extra', '/', '/gw/reload/x'])('%s matches nothing', (path) => {
    expect(matchRoute(adminRoutes, 'DELETE', path).kind).not.toBe('found');
    expect(matchRoute(adminRoutes, 'GET', path).kind).not.toBe('found');
  });
});
