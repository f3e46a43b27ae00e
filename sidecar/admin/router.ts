import type { Route } from './types.ts';

export type RouteMatch =
  | { kind: 'found'; route: Route; params: Record<string, string> }
  | { kind: 'wrong-method'; allow: string[] }
  | { kind: 'none' };

/**
 * The path as sent, without its query. It is deliberately not normalised (no `..`
 * resolution, no decoding): a parameter is one raw segment, and an encoded `/` or a
 * traversal attempt stays visible to the parameter check instead of being resolved away.
 */
export function pathOf(url: string | undefined): string | null {
  if (!url?.startsWith('/')) return null;
  const end = url.search(/[?#]/);
  return end === -1 ? url : url.slice(0, end);
}

function matchSegments(route: Route, segments: readonly string[]): Record<string, string> | null {
  if (route.segments.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const expected = route.segments[i]!;
    if (expected.startsWith(':')) params[expected.slice(1)] = segments[i]!;
    else if (expected !== segments[i]) return null;
  }
  return params;
}

export const splitPath = (path: string): string[] => path.slice(1).split('/');

/**
 * A HEAD request is answered as the GET of its path, without the body (Node's response drops
 * it): RFC 9110 §9.3.2, and every general-purpose server supports both (§9.1). Not a GET that
 * acts (the reload): HEAD is a safe method, so it must not do what that GET does.
 */
export function matchRoute(routes: readonly Route[], method: string, path: string): RouteMatch {
  const segments = splitPath(path);
  const allow: string[] = [];
  for (const route of routes) {
    const params = matchSegments(route, segments);
    if (!params) continue;
    const headAsGet = route.method === 'GET' && route.actsOnGet !== true;
    if (route.method === method || (method === 'HEAD' && headAsGet)) return { kind: 'found', route, params };
    allow.push(route.method);
    if (headAsGet) allow.push('HEAD');
  }
  return allow.length > 0 ? { kind: 'wrong-method', allow } : { kind: 'none' };
}
