import type { KubernetesObject } from '@kubernetes/client-node';
import { sameData } from '../../common/same-data.ts';
import type { Request } from './reconciler.ts';

export type Verb = 'add' | 'update' | 'delete';

/**
 * One change seen by an informer: the object's kind, the object as it is now (as it was
 * last, for a delete) and, for an update or a delete, the version seen before it.
 */
export interface WatchEvent<T> {
  kind: string;
  verb: Verb;
  object: T;
  old: T | undefined;
}

/**
 * The events one informer callback stands for. After a watch gap the informer lists again and
 * reports an object deleted and made again under its name as an update of it: a new uid, its
 * generation back at 1, which the predicates would take for a status write of the old one
 * (and leave until the next resync). It is the old one's delete and the new one's add.
 */
export function watchEvents<T extends KubernetesObject>(kind: string, verb: Verb, object: T, old: T | undefined): WatchEvent<T>[] {
  if (verb === 'update' && old !== undefined && old.metadata?.uid !== object.metadata?.uid) {
    return [
      { kind, verb: 'delete', object: old, old },
      { kind, verb: 'add', object, old: undefined },
    ];
  }
  return [{ kind, verb, object, old: verb === 'add' ? undefined : old }];
}

/** The version of an object whose change asked for a request, so an operator's own write can be told apart (operator/kit/own-writes.ts). */
export interface Cause {
  kind: string;
  object: KubernetesObject;
}

const causeOf = (event: WatchEvent<KubernetesObject>): Cause | undefined => (event.verb === 'delete' ? undefined : { kind: event.kind, object: event.object });

/** A cache of one kind that controllers read and watch (an informer, or an in-memory one in unit tests). */
export interface Source<T extends KubernetesObject> {
  get(namespace: string, name: string): T | undefined;
  list(namespace?: string): T[];
  /** Changes the controllers are told of: not the operator's own writes (operator/kit/own-writes.ts). */
  on(handler: (event: WatchEvent<T>) => void): void;
  /**
   * Every change of the cache, the operator's own writes included: for indexes over it, which
   * must hold what the cache holds (a Key's generated hash reaches its status by an own write).
   */
  onCached(handler: (event: WatchEvent<T>) => void): void;
}

/** What a controller watches, and which of its requests each change of it asks for. */
export interface Watch {
  subscribe(enqueue: (request: Request, cause?: Cause) => void): void;
  /** The requests the periodic resync revisits (none for a dependency's watch). */
  resyncRequests(): Request[];
}

export const requestFor = (obj: KubernetesObject): Request => ({ namespace: obj.metadata?.namespace ?? '', name: obj.metadata?.name ?? '' });

/**
 * The controller's own kind: a change enqueues the object itself, except an update that
 * touched only its status (the controller's own write, most of the time): reconciling
 * again would only find it up to date, and with 10,000 Keys that is 10,000 reconciles.
 * A status edited by hand is put right by the periodic resync.
 */
export function forObjects<T extends KubernetesObject>(source: Source<T>): Watch {
  return {
    subscribe: (enqueue) =>
      source.on((event) => {
        if (!statusOnlyUpdate(event)) enqueue(requestFor(event.object), causeOf(event));
      }),
    resyncRequests: () => source.list().map(requestFor),
  };
}

/** Objects the controller writes for its own (a compiled ConfigMap, a key Secret): a change enqueues their owner. */
export function owns<T extends KubernetesObject>(source: Source<T>, ownerOf: (obj: T) => Request | undefined): Watch {
  const owners = (objects: T[]): Request[] => objects.flatMap((obj) => ownerOf(obj) ?? []);
  return {
    subscribe: (enqueue) =>
      source.on((event) => {
        for (const owner of owners([event.object])) enqueue(owner, causeOf(event));
      }),
    resyncRequests: () => owners(source.list()),
  };
}

/** Another kind the controller's desired state depends on: `map` says which of its objects a change affects. */
export function watches<T extends KubernetesObject>(source: Source<T>, map: (event: WatchEvent<T>) => Iterable<Request>): Watch {
  return mapped((handler) => source.on(handler), map);
}

/**
 * Another kind whose status the controller's desired state depends on. That status is written
 * by another controller of this operator, an own write that `watches` is not told of
 * (operator/kit/own-writes.ts), so this one maps every change of the cache.
 */
export function watchesStatus<T extends KubernetesObject>(source: Source<T>, map: (event: WatchEvent<T>) => Iterable<Request>): Watch {
  return mapped((handler) => source.onCached(handler), map);
}

function mapped<T extends KubernetesObject>(listen: (handler: (event: WatchEvent<T>) => void) => void, map: (event: WatchEvent<T>) => Iterable<Request>): Watch {
  return {
    subscribe: (enqueue) =>
      listen((event) => {
        for (const request of map(event)) enqueue(request);
      }),
    resyncRequests: () => [],
  };
}

/**
 * Whether a change can alter what depends on the object: added, deleted, or a new
 * generation (spec). Status writes, most of the operator's own writes, do not, and
 * skipping them keeps one key's status update from re-reconciling its policies' keys.
 */
export const specChanged = (event: WatchEvent<KubernetesObject>): boolean =>
  event.verb !== 'update' || event.old === undefined || event.old.metadata?.generation !== event.object.metadata?.generation;

/** An update that changed neither the spec (generation) nor the metadata a reconcile reads. */
export function statusOnlyUpdate(event: WatchEvent<KubernetesObject>): boolean {
  if (event.verb !== 'update' || event.old === undefined) return false;
  const before = event.old.metadata ?? {};
  const after = event.object.metadata ?? {};
  return (
    before.generation === after.generation &&
    sameData(before.deletionTimestamp, after.deletionTimestamp) &&
    sameData(before.finalizers, after.finalizers) &&
    sameData(before.labels, after.labels) &&
    sameData(before.annotations, after.annotations) &&
    sameData(before.ownerReferences, after.ownerReferences)
  );
}
