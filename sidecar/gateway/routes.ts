import type { CompiledApi } from '../../crds/compiled.ts';
import { PrefixIndex } from './prefix-index.ts';

/** A compiled matcher, its RegExp built once at config load. */
interface Matcher {
  re: RegExp;
  method: string;
}

/** Everything the request path needs about one API, computed at config load. */
export interface Route {
  api: CompiledApi;
  /** Listen path without a trailing slash (`''` for the root). */
  prefix: string;
  /** Upstream origin (`http://host:port`), the forwarder's pool key. */
  origin: string;
  /** Upstream base path without a trailing slash. */
  basePath: string;
  /** Lower-cased auth header name. */
  authHeader: string;
  ignored: Matcher[];
}

export interface RouteMatch {
  route: Route;
  /** Path relative to the listen path, starting with `/`. */
  relativePath: string;
  /** Path (with query) to request from the upstream. */
  upstreamPath: string;
}

function trimSlash(path: string): string {
  return path.endsWith('/') ? path.slice(0, -1) : path;
}

function buildRoute(api: CompiledApi): Route {
  const target = new URL(api.target_url);
  return {
    api,
    prefix: trimSlash(api.listen_path),
    origin: target.origin,
    basePath: trimSlash(target.pathname),
    authHeader: api.auth_header_name.toLowerCase(),
    ignored: api.ignored.map((m) => ({ re: new RegExp(m.pattern), method: m.method.toUpperCase() })),
  };
}

const needsNormalising = /\/\.|%2e|\/\/|\\/i;

/**
 * Resolve dot segments (plain or percent-encoded), backslashes and repeated slashes
 * before anything matches the path, so `/api/public/../private` (or
 * `/api/public/x\..\..\private`, which Node accepts and WHATWG URL parsers read as
 * slashes) cannot pass an ignored `/public/.*` matcher and reach `/private` on the
 * upstream. Most paths have none of these and are returned as they are.
 */
export function normalisePath(path: string): string {
  if (!needsNormalising.test(path)) return path;
  return new URL(path.replace(/[\\/]{2,}/g, '/'), 'http://gw.invalid').pathname;
}

/** True when the endpoint is served without authentication (and without key-level limits). */
export function isIgnored(route: Route, method: string, relativePath: string): boolean {
  for (const matcher of route.ignored) {
    if ((matcher.method === '*' || matcher.method === method) && matcher.re.test(relativePath)) return true;
  }
  return false;
}

/**
 * Longest listen-path prefix match over the loaded APIs; prefixes end at a path segment.
 * Inactive APIs are routed too (they answer as inactive rather than fall through to a
 * shorter listen path). Of two APIs with the same listen path, the first loaded wins.
 */
export class RouteTable {
  readonly #index: PrefixIndex<Route>;
  /** Every upstream origin a request can be forwarded to under this table. */
  readonly origins: ReadonlySet<string>;

  constructor(apis: readonly CompiledApi[]) {
    const routes = apis.map(buildRoute);
    this.#index = new PrefixIndex(routes.map((route) => [route.prefix, route] as const));
    this.origins = new Set(routes.map((route) => route.origin));
  }

  match(url: string): RouteMatch | null {
    const queryAt = url.indexOf('?');
    const path = normalisePath(queryAt === -1 ? url : url.slice(0, queryAt));
    const query = queryAt === -1 ? '' : url.slice(queryAt);
    const route = this.#index.find(path);
    if (route === undefined) return null;
    const relativePath = path.slice(route.prefix.length) || '/';
    const forwarded = route.api.strip_listen_path ? relativePath : path;
    const upstreamPath = (route.basePath + forwarded || '/') + query;
    return { route, relativePath, upstreamPath };
  }
}
