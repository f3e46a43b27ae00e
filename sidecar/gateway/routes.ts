import type { CompiledApi } from '../../crds/compiled.ts';
import { pathRegex } from '../../crds/compile/path-regex.ts';
import { canonicalPath } from '../../crds/compile/request-path.ts';
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
  /** The target URL's own query, without its `?` (`''`: none), sent before the client's. */
  baseQuery: string;
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
    baseQuery: target.search.slice(1),
    authHeader: api.auth_header_name.toLowerCase(),
    ignored: api.ignored.map((m) => ({ re: pathRegex(m.pattern), method: m.method.toUpperCase() })),
  };
}

/** True when the endpoint is served without authentication (and without key-level limits). */
export function isIgnored(route: Route, method: string, relativePath: string): boolean {
  for (const matcher of route.ignored) {
    if ((matcher.method === '*' || matcher.method === method) && matcher.re.test(relativePath)) return true;
  }
  return false;
}

export interface ShadowedApi {
  api: CompiledApi;
  /** The API served on its listen path instead. */
  by: CompiledApi;
}

/** The routes whose prefix an earlier route has: the prefix index keeps the first. */
function shadowedApis(routes: Iterable<Route>): ShadowedApi[] {
  const first = new Map<string, CompiledApi>();
  const shadowed: ShadowedApi[] = [];
  for (const { prefix, api } of routes) {
    const by = first.get(prefix);
    if (by === undefined) first.set(prefix, api);
    else shadowed.push({ api, by });
  }
  return shadowed;
}

const sameApis = (a: readonly CompiledApi[], b: readonly CompiledApi[]): boolean => a.length === b.length && a.every((api, i) => api === b[i]);

/**
 * Longest listen-path prefix match over the loaded APIs; prefixes end at a path segment.
 * Inactive APIs are routed too (they answer as inactive rather than fall through to a
 * shorter listen path). Of two APIs with the same listen path, the first loaded wins.
 */
export class RouteTable {
  readonly #apis: readonly CompiledApi[];
  readonly #index: PrefixIndex<Route>;
  /** Each API's route, for the table that replaces this one. */
  readonly #routes: ReadonlyMap<CompiledApi, Route>;
  /** Every upstream origin a request can be forwarded to under this table. */
  readonly origins: ReadonlySet<string>;
  /** The APIs no request reaches: each with the API loaded before it on the same listen path. */
  readonly shadowed: readonly ShadowedApi[];

  /**
   * An API that `previous` routed (the same compiled object: its source did not change) keeps
   * its route, and when every API is the one `previous` routed in the same order (a reload for
   * a new Key), so does the whole table. Parsing every API's target URL again was most of a
   * config change at 5,000 APIs (docs/architecture.md#performance).
   */
  constructor(apis: readonly CompiledApi[], previous?: RouteTable) {
    this.#apis = [...apis];
    if (previous !== undefined && sameApis(previous.#apis, apis)) {
      this.#routes = previous.#routes;
      this.#index = previous.#index;
      this.origins = previous.origins;
      this.shadowed = previous.shadowed;
      return;
    }
    const routes = new Map<CompiledApi, Route>();
    const earlier = previous === undefined ? undefined : previous.#routes;
    for (const api of apis) routes.set(api, earlier?.get(api) ?? buildRoute(api));
    this.#routes = routes;
    this.#index = new PrefixIndex(Array.from(routes.values(), (route) => [route.prefix, route] as const));
    this.origins = new Set(Array.from(routes.values(), (route) => route.origin));
    this.shadowed = shadowedApis(routes.values());
  }

  match(target: string): RouteMatch | null {
    // A request-target has no fragment (RFC 9112 §3.2): one sent is not part of the path that
    // endpoint limits match, nor of what the upstream gets.
    const fragmentAt = target.indexOf('#');
    const url = fragmentAt === -1 ? target : target.slice(0, fragmentAt);
    const queryAt = url.indexOf('?');
    const path = canonicalPath(queryAt === -1 ? url : url.slice(0, queryAt));
    const route = this.#index.find(path);
    if (route === undefined) return null;
    const relativePath = path.slice(route.prefix.length) || '/';
    const forwarded = route.api.strip_listen_path ? relativePath : path;
    const upstreamPath = (route.basePath + forwarded || '/') + upstreamQuery(route.baseQuery, queryAt === -1 ? '' : url.slice(queryAt));
    return { route, relativePath, upstreamPath };
  }
}

/**
 * The target URL's query and the client's (from its `?`, as sent), in that order (`?api-version=1&page=2`), as a
 * reverse proxy joins them: an upstream that needs a fixed parameter gets it on every request.
 */
function upstreamQuery(base: string, client: string): string {
  if (base === '') return client;
  return client.length <= 1 ? `?${base}` : `?${base}&${client.slice(1)}`;
}
