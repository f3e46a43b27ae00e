import { setTimeout as sleep } from 'node:timers/promises';
import { ApiException, type ConfigurationOptions, CoreV1Api, CustomObjectsApi, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { apiVersion, group, kinds, version } from '../../crds/kinds.ts';
import { PRODUCT_MAX_TAGS } from '../../crds/schemas/portal-product.ts';
import { productNamed } from '../../crds/product-id.ts';
import { apiEntryOf, categoryEntryOf, productOf } from './entries.ts';
import { ADMIN_DEADLINE_MS, deadline } from './kube-deadline.ts';
import { isNotFound, releaseRetained, retain, unretain } from './retained-config-maps.ts';
import type { ApiEntry, CategoryEntry, NewKey, ResourceStore, TagOutcome } from './types.ts';

interface Listed extends KubernetesObject {
  spec?: Record<string, unknown>;
}

/**
 * How long a Key's create may take before create-key gives up on it (README.md#admin-operations).
 * An API server that stalls holds the request, not the caller: past this the caller is
 * answered, and a create that lands later is deleted again.
 */
export const KEY_CREATE_DEADLINE_MS = 10_000;

/** A Key's create that the API server had not answered by its deadline; the Key is deleted if it lands later. */
export class KeyCreateDeadlineError extends Error {
  override readonly name = 'KeyCreateDeadlineError';
}

/** Optimistic-concurrency retries of a tag write that raced another writer. */
const maxConflictRetries = 10;

const isConflict = (error: unknown): boolean => error instanceof ApiException && error.code === 409;

/**
 * The cluster's store: gw.dev custom resources in the given namespaces (or all of them)
 * through the API server. The sidecar's account needs get/list on apidefinitions,
 * categories and portalproducts, update on portalproducts, create and delete on keys, delete on
 * apidefinitions, and get/list/patch/delete on configmaps.
 */
export class KubernetesResourceStore implements ResourceStore {
  readonly namespaces: readonly string[];
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;
  /** Each product's tag write under way in this gateway, the next one's to wait for. */
  readonly #tagWrites = new Map<string, Promise<void>>();

  readonly #keyCreateDeadlineMs: number;
  /** Each other operation's bound on its API calls together. */
  readonly #deadlineMs: number;
  /** Logs what a late create's deletion met; the caller was answered long before. */
  readonly #lateCreateFailed: (error: unknown, key: NewKey) => void;

  constructor(
    kc: KubeConfig,
    namespaces: readonly string[],
    options: { keyCreateDeadlineMs?: number; deadlineMs?: number; lateCreateFailed?: (error: unknown, key: NewKey) => void } = {},
  ) {
    this.namespaces = namespaces;
    this.#keyCreateDeadlineMs = options.keyCreateDeadlineMs ?? KEY_CREATE_DEADLINE_MS;
    this.#deadlineMs = options.deadlineMs ?? ADMIN_DEADLINE_MS;
    this.#lateCreateFailed = options.lateCreateFailed ?? (() => undefined);
    this.#custom = kc.makeApiClient(CustomObjectsApi);
    this.#core = kc.makeApiClient(CoreV1Api);
  }

  async #list(plural: string, bound: ConfigurationOptions): Promise<Listed[]> {
    const lists = (await Promise.all(
      this.namespaces.length === 0
        ? [this.#custom.listClusterCustomObject({ group, version, plural }, bound)]
        : this.namespaces.map((namespace) => this.#custom.listNamespacedCustomObject({ group, version, namespace, plural }, bound)),
    )) as { items: Listed[] }[];
    return lists.flatMap((list) => list.items);
  }

  listApis(): Promise<ApiEntry[]> {
    return this.#listApis(deadline(this.#deadlineMs));
  }

  async #listApis(bound: ConfigurationOptions): Promise<ApiEntry[]> {
    const items = await this.#list(kinds.ApiDefinition.plural, bound);
    return items.map((item) => apiEntryOf(item, '')).filter((entry): entry is ApiEntry => entry !== null);
  }

  async apisWithId(apiId: string): Promise<ApiEntry[]> {
    return (await this.listApis()).filter((entry) => entry.apiId === apiId);
  }

  async listCategories(): Promise<CategoryEntry[]> {
    const items = await this.#list(kinds.Category.plural, deadline(this.#deadlineMs));
    return items.map((item) => categoryEntryOf(item, '')).filter((entry): entry is CategoryEntry => entry !== null);
  }

  /**
   * Creates the Key, or throws KeyCreateDeadlineError once the API server has not answered it
   * within the deadline. A create held that long may still land: the Key would then make a
   * session of a raw key whose only answer is gone. So when it lands it is deleted again (the
   * operator removes the session with it); a create that fails in the end leaves nothing.
   */
  async createKey(key: NewKey): Promise<void> {
    const created = this.#custom.createNamespacedCustomObject({
      group,
      version,
      namespace: key.namespace,
      plural: kinds.Key.plural,
      body: {
        apiVersion,
        kind: kinds.Key.kind,
        metadata: { name: key.name, namespace: key.namespace, labels: { 'app.kubernetes.io/created-by': 'gw-admin' } },
        spec: key.spec,
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), this.#keyCreateDeadlineMs)));
    try {
      if ((await Promise.race([created, deadline])) !== 'late') return;
    } finally {
      clearTimeout(timer);
    }
    created.then(
      () => this.#deleteKey(key).catch((error: unknown) => this.#lateCreateFailed(error, key)),
      () => undefined,
    );
    throw new KeyCreateDeadlineError(`the API server did not answer the Key's create within ${this.#keyCreateDeadlineMs} ms`);
  }

  async #deleteKey({ namespace, name }: NewKey): Promise<void> {
    try {
      await this.#custom.deleteNamespacedCustomObject({ group, version, namespace, plural: kinds.Key.plural, name });
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  /**
   * One product's tags are written one request at a time in this gateway, so its own concurrent
   * requests never conflict; another gateway's write still can, and a conflict is read again
   * and retried, after a random pause that grows with each try so that writers spread out.
   */
  addProductTag(productId: string, tag: string): Promise<TagOutcome | null> {
    const previous = this.#tagWrites.get(productId) ?? Promise.resolve();
    // The deadline runs from the request, its wait for this gateway's earlier writes included.
    const bound = deadline(this.#deadlineMs);
    const written = previous.then(() => this.#addProductTag(productId, tag, bound));
    const settled = written.then(() => undefined, () => undefined);
    this.#tagWrites.set(productId, settled);
    void settled.then(() => {
      if (this.#tagWrites.get(productId) === settled) this.#tagWrites.delete(productId);
    });
    return written;
  }

  async #addProductTag(productId: string, tag: string, bound: ConfigurationOptions): Promise<TagOutcome | null> {
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) await sleep(Math.random() * 25 * attempt);
      const product = productNamed(await this.#list(kinds.PortalProduct.plural, bound), productId, productOf);
      if (!product) return null;
      const view = productOf(product)!;
      if (view.tags.some((t) => t.Name === tag)) return 'exists';
      if (view.tags.length >= PRODUCT_MAX_TAGS) return 'full';
      // A replace carries the resourceVersion it read: a concurrent writer makes it fail
      // with 409 instead of one write silently dropping the other's tag.
      const body = { ...product, spec: { ...product.spec, tags: [...view.tags, { Name: tag }] } };
      try {
        await this.#custom.replaceNamespacedCustomObject({
          group,
          version,
          namespace: view.namespace ?? '',
          plural: kinds.PortalProduct.plural,
          name: view.name,
          body,
        }, bound);
        return 'added';
      } catch (error) {
        if (!isConflict(error) || attempt >= maxConflictRetries) throw error;
      }
    }
  }

  /**
   * Deletes every ApiDefinition claiming the api_id: a duplicate left behind would be compiled
   * under it at once, and served in place of the API deleted before any reload.
   */
  async deleteApi(apiId: string): Promise<boolean> {
    const bound = deadline(this.#deadlineMs);
    let deleted = false;
    for (const api of (await this.#listApis(bound)).filter((entry) => entry.apiId === apiId)) {
      if (await this.#deleteOne(api, bound)) deleted = true;
    }
    return deleted;
  }

  async #deleteOne(api: ApiEntry, bound: ConfigurationOptions): Promise<boolean> {
    const retained = await retain(this.#core, api.namespace, api.name, bound);
    try {
      await this.#custom.deleteNamespacedCustomObject(
        {
          group,
          version,
          namespace: api.namespace,
          plural: kinds.ApiDefinition.plural,
          name: api.name,
        },
        bound,
      );
      return true;
    } catch (error) {
      // The API still there (the delete refused, or not answered in time): its ConfigMap goes
      // back to the operator, each call on a deadline of its own. Gone (a delete racing this one
      // answered "deleted", or kubectl's): it stays retained until the reload, as that answer
      // promised; put back, the operator would remove it with the API.
      const exists = retained !== null && (await this.#apiExists(api.namespace, api.name, deadline(this.#deadlineMs)).catch(() => true));
      if (retained && exists) await unretain(this.#core, retained, deadline(this.#deadlineMs)).catch(() => undefined);
      if (isNotFound(error)) return false;
      throw error;
    }
  }

  async #apiExists(namespace: string, name: string, bound: ConfigurationOptions): Promise<boolean> {
    try {
      await this.#custom.getNamespacedCustomObject({ group, version, namespace, plural: kinds.ApiDefinition.plural, name }, bound);
      return true;
    } catch (error) {
      if (isNotFound(error)) return false;
      throw error;
    }
  }

  releaseDeleted(): Promise<string[]> {
    const bound = deadline(this.#deadlineMs);
    return releaseRetained(this.#core, this.namespaces, (namespace, name) => this.#apiExists(namespace, name, bound), bound);
  }
}
