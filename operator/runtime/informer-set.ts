import { makeInformer, type Informer, type KubeConfig, type KubernetesObject, type ObjectCache } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import { RestartingInformer } from '../../common/restarting-informer.ts';
import type { OwnWrites } from '../kit/own-writes.ts';
import { watchEvents, type Source, type Verb, type WatchEvent } from '../kit/watch.ts';
import type { ResourceType } from './resources.ts';
import { internRepeatedValues, StringPool } from './string-pool.ts';

const RESTART_BASE_MS = 250;
/** Objects per page of the initial list (and of each re-list after a watch expired). */
export const LIST_PAGE_SIZE = 500;
const RESTART_MAX_MS = 10_000;
/** Shared by every cache of the process: the namespace and apiVersion repeat across kinds. */
const repeatedValues = new StringPool();

/**
 * The informer cache of one kind over the watched namespaces (one informer per
 * namespace, or one cluster-wide), each kept running through API-server outages
 * (common/restarting-informer.ts). Each change is handed on with the version seen before it.
 */
export class InformerSet<T extends KubernetesObject> implements Source<T> {
  readonly #informers: Array<Informer<T> & ObjectCache<T>> = [];
  readonly #running: RestartingInformer<T>[] = [];
  /** The informers whose list has not succeeded yet: until none is left, the cache may lack objects the API server has. */
  readonly #unlisted = new Set<RestartingInformer<T>>();
  readonly #log: Logger;
  readonly #handlers: Array<(event: WatchEvent<T>) => void> = [];
  readonly #cacheHandlers: Array<(event: WatchEvent<T>) => void> = [];
  /**
   * The version of each object last handed on, by namespace and name: the cache holds these
   * very objects, and the maps are keyed by their own name strings, so this costs one map
   * entry each and no new string.
   */
  readonly #lastSeen = new Map<string, Map<string, T>>();

  readonly #prune: ((object: T) => void) | undefined;
  readonly #ownWrites: OwnWrites | undefined;
  readonly #kind: string;

  /**
   * `prune` trims each object before the cache keeps it (what the controllers never read);
   * the versions in `ownWrites` are cached but not handed on (operator/kit/own-writes.ts);
   * `listPageSize` is LIST_PAGE_SIZE unless a test lists in smaller pages.
   */
  constructor(
    kc: KubeConfig,
    type: ResourceType,
    namespaces: string[],
    log: Logger,
    options: { labelSelector?: string; prune?: (object: T) => void; ownWrites?: OwnWrites; listPageSize?: number } = {},
  ) {
    const { labelSelector, listPageSize = LIST_PAGE_SIZE } = options;
    this.#prune = options.prune;
    this.#ownWrites = options.ownWrites;
    this.#kind = type.kind;
    this.#log = log.child({ informer: type.kind });
    const scopes = namespaces.length > 0 ? namespaces : [undefined];
    for (const namespace of scopes) {
      const listFn = async (): Promise<{ items: T[]; metadata: { resourceVersion?: string } }> => {
        // Page by page, each trimmed before the next is read: the whole list's response never
        // sits in memory at once, untrimmed (100,000 Keys would be hundreds of MiB of JSON).
        const items: T[] = [];
        let resourceVersion: string | undefined;
        let next: string | undefined;
        do {
          const page = await type.list(namespace, { labelSelector, limit: listPageSize, continue: next });
          for (const item of page.items as T[]) {
            this.#trim(item);
            items.push(item);
          }
          // Every page of one list is read at the first page's version: the watch starts there.
          resourceVersion = page.resourceVersion;
          next = page.continue;
        } while (next !== undefined);
        return { items, metadata: { resourceVersion } };
      };
      const informer = makeInformer<T>(kc, type.path(namespace), listFn as never, labelSelector);
      this.#wire(informer);
      this.#informers.push(informer);
      const running: RestartingInformer<T> = new RestartingInformer(informer, {
        log: this.#log,
        what: type.kind,
        baseMs: RESTART_BASE_MS,
        maxMs: RESTART_MAX_MS,
        onListed: () => this.#unlisted.delete(running),
      });
      this.#running.push(running);
      this.#unlisted.add(running);
    }
  }

  on(handler: (event: WatchEvent<T>) => void): void {
    this.#handlers.push(handler);
  }

  onCached(handler: (event: WatchEvent<T>) => void): void {
    this.#cacheHandlers.push(handler);
  }

  /** Whether every informer has listed once: the cache then holds what the API server held, and keeps up through its watches. */
  synced(): boolean {
    return this.#unlisted.size === 0;
  }

  /** Resolves once every informer has tried its first list; a failed one is retried in the background (see synced()). */
  async start(): Promise<void> {
    await Promise.all(this.#running.map((informer) => informer.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.#running.map((informer) => informer.stop()));
  }

  get(namespace: string, name: string): T | undefined {
    for (const informer of this.#informers) {
      const found = informer.get(name, namespace);
      if (found) return found;
    }
    return undefined;
  }

  list(namespace?: string): T[] {
    return this.#informers.flatMap((informer) => [...informer.list(namespace)]);
  }

  #wire(informer: Informer<T> & ObjectCache<T>): void {
    informer.on('add', (obj) => this.#emit(obj, 'add'));
    informer.on('update', (obj) => this.#emit(obj, 'update'));
    informer.on('delete', (obj) => this.#emit(obj, 'delete'));
  }

  /**
   * The cache holds this very object: dropping managedFields (never read here) saves roughly
   * a third of the cache's memory with 10,000 Keys and their Secrets. Trimming twice is harmless.
   * The field is set undefined, not deleted: V8 turns an object that loses a property other
   * than its last into a hash table (about 450 bytes instead of under 100 for metadata).
   * Values that repeat across objects then share one copy (operator/runtime/string-pool.ts).
   */
  #trim(object: T): void {
    if (object.metadata?.managedFields) object.metadata.managedFields = undefined;
    this.#prune?.(object);
    internRepeatedValues(repeatedValues, object);
  }

  /** Records `object` as its name's last version (forgets it on delete); returns the version before. */
  #swapLastSeen(object: T, verb: Verb): T | undefined {
    const namespace = object.metadata?.namespace ?? '';
    const name = object.metadata?.name ?? '';
    let inNamespace = this.#lastSeen.get(namespace);
    const old = inNamespace?.get(name);
    if (verb === 'delete') {
      inNamespace?.delete(name);
      if (inNamespace?.size === 0) this.#lastSeen.delete(namespace);
    } else {
      if (!inNamespace) this.#lastSeen.set(namespace, (inNamespace = new Map()));
      inNamespace.set(name, object);
    }
    return old;
  }

  #emit(object: T, verb: Verb): void {
    this.#trim(object);
    const old = this.#swapLastSeen(object, verb);
    for (const event of watchEvents(this.#kind, verb, object, old)) this.#dispatch(event);
  }

  #dispatch(event: WatchEvent<T>): void {
    for (const handler of this.#cacheHandlers) handler(event);
    if (event.verb === 'delete') this.#ownWrites?.forget(this.#kind, event.object);
    else if (this.#ownWrites?.take(this.#kind, event.object)) return;
    for (const handler of this.#handlers) handler(event);
  }
}
