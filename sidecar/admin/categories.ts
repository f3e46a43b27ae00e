import { claimsBefore } from '../../crds/product-id.ts';
import type { ApiEntry, CategoryEntry } from '../resources/types.ts';
import { requireAccess, requireBearer, scopeChecks } from './auth.ts';
import { AdminError, adminErrors } from './errors.ts';
import { pathId } from './params.ts';
import type { HandlerContext, Reply } from './types.ts';

async function retrieve<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    throw new AdminError(adminErrors.apisUnavailable, undefined, { cause: error });
  }
}

/**
 * The ApiDefinition holding each api_id, ranked by what the store reads of them as the compile
 * step ranks them (claimsBefore). The others claiming one are copies, refused as DuplicateApiId
 * and never served: the categories they list are no API's.
 */
export function holders(apis: readonly ApiEntry[]): Map<string, ApiEntry> {
  const byId = new Map<string, ApiEntry>();
  for (const api of apis) {
    const held = byId.get(api.apiId);
    if (held === undefined || claimsBefore(api, held)) byId.set(api.apiId, api);
  }
  return byId;
}

/**
 * GET /api/apis/oas/{apiId}/categories (docs/behaviour.md#admin-operations): needs `get` on the API's
 * ApiDefinition (in its namespace, or by its name). An unknown id is only reported as such to a caller who could read it
 * (checked at the store's scope), so ids cannot be probed without permission.
 */
export async function apiCategories(ctx: HandlerContext): Promise<Reply> {
  const { req, deps, path } = ctx;
  const principal = await requireBearer(req, deps.auth.bearer);
  const apiId = pathId(ctx.params.apiId!, 'apiId');
  const api = holders(await retrieve(() => deps.resources.apisWithId(apiId))).get(apiId);
  if (!api?.oas) {
    await requireAccess(principal, scopeChecks(deps.resources.namespaces, 'get', 'apidefinitions'), path);
    throw new AdminError(adminErrors.apiNotFound);
  }
  // By name: a Role granting `get` on this ApiDefinition alone (resourceNames) lets its reader in,
  // as `kubectl get` would; a grant on the namespace covers every name.
  await requireAccess(principal, [{ verb: 'get', resource: 'apidefinitions', namespace: api.namespace, name: api.name }], path);
  return { status: 200, body: { categories: [...api.categories] } };
}

/**
 * Every category named by a Category resource or an API, with how many APIs list it, by name.
 * An API is an api_id, and its categories are those its holder lists: a copy of one
 * (DuplicateApiId, never served) is not counted again, nor is a category only a copy names listed.
 */
export function countCategories(apis: readonly ApiEntry[], categories: readonly CategoryEntry[]): { name: string; count: number }[] {
  const counts = new Map<string, number>(categories.map((c) => [c.name, 0]));
  for (const api of holders(apis).values()) {
    for (const name of api.categories) counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  return [...counts.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([name, count]) => ({ name, count }));
}

/** GET /api/apis/categories (docs/behaviour.md#admin-operations): needs `list` on apidefinitions and categories where the store reads. */
export async function allCategories(ctx: HandlerContext): Promise<Reply> {
  const { req, deps, path } = ctx;
  const principal = await requireBearer(req, deps.auth.bearer);
  const { namespaces } = deps.resources;
  await requireAccess(principal, [...scopeChecks(namespaces, 'list', 'apidefinitions'), ...scopeChecks(namespaces, 'list', 'categories')], path);
  const [apis, categories] = await retrieve(() => Promise.all([deps.resources.listApis(), deps.resources.listCategories()]));
  return { status: 200, body: { categories: countCategories(apis, categories) } };
}
