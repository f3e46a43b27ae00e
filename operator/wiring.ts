import { apiNameOf } from '../common/compiled-config-map.ts';
import { apiIdOf, grantedApiIds } from './config/compile-api.ts';
import type { Caches } from './controllers/context.ts';
import { KEY_LABEL } from './keys/key-secrets.ts';
import { objectKey, type GwObject } from './runtime/gw-object.ts';

export interface Queues {
  apis: (key: string) => void;
  policies: (key: string) => void;
  keys: (key: string) => void;
  categories: (key: string) => void;
  products: (key: string) => void;
}

const keyOf = (obj: { metadata?: { namespace?: string; name?: string } }): string => objectKey(obj.metadata?.namespace ?? '', obj.metadata?.name ?? '');

/**
 * Which objects a change affects: every watch event enqueues the changed object and the
 * objects whose desired state depends on it (a policy's APIs — also the ones it granted
 * before the change — an API's policies and categories, a key's policies, a ConfigMap's
 * or Secret's owner). Reconciles read the caches, so enqueueing too much is only work.
 */
export function wireWatches(caches: Caches, queues: Queues): void {
  const grantedBefore = new Map<string, string[]>();
  const specChanged = generationTracker();
  const apisById = (ids: string[]): string[] => {
    const wanted = new Set(ids);
    return caches.apis.list().filter((api) => wanted.has(apiIdOf(api))).map(keyOf);
  };

  caches.apis.on((api, verb) => {
    queues.apis(keyOf(api));
    if (!specChanged(api, verb)) return;
    const apiId = apiIdOf(api);
    for (const policy of caches.policies.list()) if (grantedApiIds(policy).includes(apiId)) queues.policies(keyOf(policy));
    // Categories it left must recount too, and the old spec is not at hand: recount the namespace's.
    for (const category of caches.categories.list(api.metadata.namespace)) queues.categories(keyOf(category));
  });
  caches.policies.on((policy, verb) => {
    const key = keyOf(policy);
    const now = verb === 'delete' ? [] : grantedApiIds(policy);
    const before = grantedBefore.get(key) ?? [];
    if (verb === 'delete') grantedBefore.delete(key);
    else grantedBefore.set(key, now);
    queues.policies(key);
    if (!specChanged(policy, verb)) return;
    for (const api of apisById([...new Set([...now, ...before])])) queues.apis(api);
    for (const k of caches.keys.list(policy.metadata.namespace)) {
      if ((k.spec.apply_policies ?? []).includes(policy.metadata.name)) queues.keys(keyOf(k));
    }
  });
  caches.keys.on((key, verb) => {
    queues.keys(keyOf(key));
    if (!specChanged(key, verb)) return;
    for (const name of key.spec.apply_policies ?? []) queues.policies(objectKey(key.metadata.namespace, name));
  });
  caches.categories.on((category) => queues.categories(keyOf(category)));
  caches.products.on((product) => queues.products(keyOf(product)));
  caches.configMaps.on((cm) => {
    const apiName = apiNameOf(cm.metadata?.name ?? '');
    if (apiName) queues.apis(objectKey(cm.metadata?.namespace ?? '', apiName));
  });
  caches.secrets.on((secret) => {
    const keyName = secret.metadata?.labels?.[KEY_LABEL];
    if (keyName) queues.keys(objectKey(secret.metadata?.namespace ?? '', keyName));
  });
}

/**
 * Whether an event can change what depends on the object: added, deleted, or a new
 * generation (spec). Status writes — most of the operator's own writes — do not, and
 * skipping them keeps one key's status update from re-reconciling its policies' keys.
 */
function generationTracker(): (obj: GwObject, verb: 'add' | 'update' | 'delete') => boolean {
  const seen = new Map<string, number | undefined>();
  return (obj, verb) => {
    const key = `${obj.kind ?? ''}/${keyOf(obj)}`;
    const generation = obj.metadata.generation;
    if (verb === 'delete') {
      seen.delete(key);
      return true;
    }
    const changed = verb === 'add' || !seen.has(key) || seen.get(key) !== generation;
    seen.set(key, generation);
    return changed;
  };
}

/** Everything, for the periodic resync: drift (hand edits, missed events) is corrected within one period. */
export function enqueueAll(caches: Caches, queues: Queues): void {
  const all = (items: GwObject[], enqueue: (key: string) => void): void => items.forEach((item) => enqueue(keyOf(item)));
  all(caches.apis.list(), queues.apis);
  all(caches.policies.list(), queues.policies);
  all(caches.keys.list(), queues.keys);
  all(caches.categories.list(), queues.categories);
  all(caches.products.list(), queues.products);
  for (const cm of caches.configMaps.list()) {
    const apiName = apiNameOf(cm.metadata?.name ?? '');
    if (apiName) queues.apis(objectKey(cm.metadata?.namespace ?? '', apiName));
  }
}
