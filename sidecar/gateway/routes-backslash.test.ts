import { describe, expect, it } from 'vitest';
import { api } from '../../test/support/compiled-fixtures.ts';
import { canonicalPath } from '../../crds/compile/request-path.ts';
import { isIgnored, RouteTable } from './routes.ts';

describe('backslashes in the request path', () => {
  it('are read as slashes, the way WHATWG URL parsers upstream read them', () => {
    expect(canonicalPath('/shop/public/x\\..\\..\\private')).toBe('/shop/private');
    expect(canonicalPath('/a\\\\b')).toBe('/a/b');
  });

  it('cannot carry a request past an ignored matcher to another endpoint', () => {
    const table = new RouteTable([
      api('shop', {
        source: { kind: 'ApiDefinition', namespace: 'ns', name: 'shop' },
        listen_path: '/shop/',
        target_url: 'http://a:1/base',
        ignored: [{ path: '/public/{id}', pattern: '^(?:/public/(.*))$', method: 'GET' }],
      }),
    ]);
    const match = table.match('/shop/public/x\\..\\..\\private?q=1');
    expect(match).toMatchObject({ relativePath: '/private', upstreamPath: '/base/private?q=1' });
    expect(isIgnored(match!.route, 'GET', match!.relativePath)).toBe(false);
    expect(isIgnored(match!.route, 'GET', table.match('/shop/public/x')!.relativePath)).toBe(true);
  });
});
