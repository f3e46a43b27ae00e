import type { KubernetesObject, V1ConfigMap, V1Secret } from '@kubernetes/client-node';
import { pino } from 'pino';
import { MemorySessionStore } from '../../common/session-store.ts';
import type { KindName } from '../../crds/kinds.ts';
import { defaultGatewaySettings } from '../../crds/settings.ts';
import type { ConfigMapWriter } from '../config/config-map-writer.ts';
import type { FinalizerWriter } from '../kit/controllerutil.ts';
import type { Request } from '../kit/reconciler.ts';
import { watchEvents, type Source, type WatchEvent } from '../kit/watch.ts';
import { hashOfSecret, keySecret, keySecretName, ownedBy, SecretNameTakenError, type KeySecretStore } from '../keys/key-secrets.ts';
import type { EventRecorder, EventType } from '../runtime/event-recorder.ts';
import type { GwObject, GwStatus } from '../runtime/gw-object.ts';
import { OperatorMetrics } from '../runtime/metrics.ts';
import type { StatusPatch, StatusWriter } from '../runtime/status.ts';
import { indexCaches, type Caches, type ControllerContext } from './context.ts';

/**
 * In-memory stand-ins for what a controller reads and writes, for the unit tests beside
 * each controller. Each writer applies its write to the in-memory cache, as the informer
 * would after the API server accepted it, so a second reconcile sees the first one's work.
 * The behaviour against a real API server is proved by the integration tests.
 */

const keyOf = (obj: KubernetesObject): string => `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;

export class MemorySource<T extends KubernetesObject> implements Source<T> {
  readonly #objects = new Map<string, T>();
  readonly #handlers: Array<(event: WatchEvent<T>) => void> = [];
  readonly #cacheHandlers: Array<(event: WatchEvent<T>) => void> = [];
  readonly #kind: string;

  constructor(kind = 'Thing') {
    this.#kind = kind;
  }

  get(namespace: string, name: string): T | undefined {
    return this.#objects.get(`${namespace}/${name}`);
  }

  list(namespace?: string): T[] {
    return [...this.#objects.values()].filter((obj) => namespace === undefined || obj.metadata?.namespace === namespace);
  }

  on(handler: (event: WatchEvent<T>) => void): void {
    this.#handlers.push(handler);
  }

  onCached(handler: (event: WatchEvent<T>) => void): void {
    this.#cacheHandlers.push(handler);
  }

  /** A change, as its watch event; `ownWrite`: one the operator wrote, which `on`'s handlers are not told of (operator/kit/own-writes.ts). */
  put(object: T, ownWrite = false): void {
    const old = this.#objects.get(keyOf(object));
    this.#objects.set(keyOf(object), object);
    for (const event of watchEvents(this.#kind, old ? 'update' : 'add', object, old)) this.#emit(event, ownWrite);
  }

  remove(namespace: string, name: string): void {
    const old = this.#objects.get(`${namespace}/${name}`);
    if (!old) return;
    this.#objects.delete(`${namespace}/${name}`);
    this.#emit({ kind: this.#kind, verb: 'delete', object: old, old }, false);
  }

  #emit(event: WatchEvent<T>, ownWrite: boolean): void {
    for (const handler of this.#cacheHandlers) handler(event);
    if (!ownWrite) for (const handler of this.#handlers) handler(event);
  }
}

type MemoryCaches = { [P in keyof Caches]: Caches[P] extends Source<infer T> ? MemorySource<T> : never };

const sourceOf = <K extends KindName>(caches: MemoryCaches, kind: K): MemorySource<GwObject<K>> => {
  const byKind: { [P in KindName]: MemorySource<GwObject<P>> } = {
    ApiDefinition: caches.apis,
    Policy: caches.policies,
    Key: caches.keys,
    Category: caches.categories,
    PortalProduct: caches.products,
  };
  return byKind[kind];
};

export class RecordingStatusWriter implements StatusWriter {
  readonly writes: Array<{ kind: KindName; name: string; status: object }> = [];
  readonly #caches: MemoryCaches;

  constructor(caches: MemoryCaches) {
    this.#caches = caches;
  }

  async write<K extends KindName>(kind: K, obj: GwObject<K>, status: StatusPatch<GwStatus<K>>): Promise<void> {
    this.writes.push({ kind, name: obj.metadata.name, status });
    sourceOf(this.#caches, kind).put({ ...obj, status: { ...obj.status, ...status } }, true);
  }
}

export class RecordingEvents implements EventRecorder {
  readonly events: Array<{ name: string; type: EventType; reason: string; message: string }> = [];

  record(obj: KubernetesObject, type: EventType, reason: string, message: string): void {
    this.events.push({ name: obj.metadata?.name ?? '', type, reason, message });
  }
}

export class MemoryConfigMapWriter implements ConfigMapWriter {
  readonly #configMaps: MemorySource<V1ConfigMap>;

  /** `configMaps` is what the API server stores: the cache unless a test makes the cache lag behind it. */
  constructor(configMaps: MemorySource<V1ConfigMap>) {
    this.#configMaps = configMaps;
  }

  async apply(desired: V1ConfigMap, current: V1ConfigMap | undefined): Promise<'created' | 'updated' | 'changed'> {
    const stored = this.#configMaps.get(desired.metadata?.namespace ?? '', desired.metadata?.name ?? '');
    if (stored?.metadata?.resourceVersion !== current?.metadata?.resourceVersion || (stored === undefined) !== (current === undefined)) return 'changed';
    this.#configMaps.put(structuredClone(desired));
    return current ? 'updated' : 'created';
  }

  async stored(namespace: string, name: string): Promise<V1ConfigMap | undefined> {
    return structuredClone(this.#configMaps.get(namespace, name));
  }

  async delete(namespace: string, name: string, resourceVersion: string | undefined): Promise<'deleted' | 'changed'> {
    const stored = this.#configMaps.get(namespace, name);
    if (stored && stored.metadata?.resourceVersion !== resourceVersion) return 'changed';
    this.#configMaps.remove(namespace, name);
    return 'deleted';
  }
}

/** Generates the raw keys "raw-1", "raw-2", … so tests know the hash to expect. */
export class MemoryKeySecrets implements KeySecretStore {
  readonly #secrets: MemorySource<V1Secret>;
  #generated = 0;

  constructor(secrets: MemorySource<V1Secret>) {
    this.#secrets = secrets;
  }

  async create(key: GwObject<'Key'>): Promise<string | undefined> {
    const existing = this.#secrets.get(key.metadata.namespace, keySecretName(key.metadata.name));
    if (existing) {
      if (!ownedBy(existing, key)) throw new SecretNameTakenError(`Secret ${keySecretName(key.metadata.name)} exists and is not this Key's`);
      return hashOfSecret(existing);
    }
    this.#generated += 1;
    const { secret, hash } = keySecret(key, `raw-${this.#generated}`);
    this.#secrets.put(secret);
    return hash;
  }

  async delete(key: GwObject<'Key'>): Promise<void> {
    const name = keySecretName(key.metadata.name);
    const existing = this.#secrets.get(key.metadata.namespace, name);
    if (existing && ownedBy(existing, key)) this.#secrets.remove(key.metadata.namespace, name);
  }
}

export class MemoryFinalizers implements FinalizerWriter {
  readonly #caches: MemoryCaches;

  constructor(caches: MemoryCaches) {
    this.#caches = caches;
  }

  async set<K extends KindName>(kind: K, obj: GwObject<K>, finalizers: string[]): Promise<GwObject<K>> {
    const source = sourceOf(this.#caches, kind);
    const updated: GwObject<K> = { ...obj, metadata: { ...obj.metadata, finalizers } };
    // The API server removes an object being deleted once its last finalizer is gone.
    if (obj.metadata.deletionTimestamp && finalizers.length === 0) source.remove(obj.metadata.namespace, obj.metadata.name);
    else source.put(updated);
    return updated;
  }
}

/** A controller context on in-memory caches and writers, plus handles on each for the test to drive and inspect. */
export function fakeContext() {
  const caches: MemoryCaches = {
    apis: new MemorySource(),
    policies: new MemorySource(),
    keys: new MemorySource(),
    categories: new MemorySource(),
    products: new MemorySource(),
    configMaps: new MemorySource(),
    secrets: new MemorySource(),
  };
  const status = new RecordingStatusWriter(caches);
  const events = new RecordingEvents();
  const sessions = new MemorySessionStore();
  const ctx: ControllerContext = {
    log: pino({ level: 'silent' }),
    caches,
    indexes: indexCaches(caches),
    status,
    events,
    sessions,
    finalizers: new MemoryFinalizers(caches),
    configMaps: new MemoryConfigMapWriter(caches.configMaps),
    keySecrets: new MemoryKeySecrets(caches.secrets),
    settings: defaultGatewaySettings,
    metrics: new OperatorMetrics(() => ({}), false),
  };
  return { ctx, caches, status, events, sessions };
}

/** Everything a controller's watches enqueue while `change` runs. */
export function enqueuedBy(watchesOf: { watches: ReadonlyArray<{ subscribe(enqueue: (request: Request) => void): void }> }, change: () => void): string[] {
  const seen: string[] = [];
  for (const watch of watchesOf.watches) watch.subscribe((request) => seen.push(`${request.namespace}/${request.name}`));
  change();
  return [...new Set(seen)].sort();
}
