import { ApiException, type V1OwnerReference } from '@kubernetes/client-node';
import type { KindName } from '../../crds/kinds.ts';
import type { EventRecorder } from '../runtime/event-recorder.ts';
import type { GwObject, GwStatus } from '../runtime/gw-object.ts';
import { nextStatus, type DesiredStatus, type StatusWriter } from '../runtime/status.ts';

/**
 * Helpers every controller needs, after controller-runtime's controllerutil: status with
 * its event, finalizers, controller references, and the API errors a reconcile tells apart.
 */

/**
 * Writes the status a reconcile decided, unless the resource already carries it; a
 * resource turning (or staying, with new words) not Ready also gets a Warning event
 * saying why, so `kubectl get events` tells the story. One deleted meanwhile gets neither.
 */
export async function setStatus<K extends KindName>(
  writers: { status: StatusWriter; events: EventRecorder },
  kind: K,
  obj: GwObject<K>,
  desired: DesiredStatus<GwStatus<K>>,
): Promise<void> {
  const status = nextStatus(obj, desired);
  if (!status) return;
  try {
    await writers.status.write(kind, obj, status);
  } catch (error) {
    // Deleted while it was reconciled: its delete event brings whatever is left to do.
    if (isNotFound(error)) return;
    throw error;
  }
  if (!desired.ready) writers.events.record(obj, 'Warning', desired.reason, desired.message);
}

/** Sets an object's finalizer list (with the resourceVersion read, so a concurrent change conflicts instead of being overwritten). */
export interface FinalizerWriter {
  set<K extends KindName>(kind: K, obj: GwObject<K>, finalizers: string[]): Promise<GwObject<K>>;
}

export const hasFinalizer = (obj: GwObject, finalizer: string): boolean => (obj.metadata.finalizers ?? []).includes(finalizer);

/** The object with the finalizer added (written only when missing). */
export async function addFinalizer<K extends KindName>(writer: FinalizerWriter, kind: K, obj: GwObject<K>, finalizer: string): Promise<GwObject<K>> {
  if (hasFinalizer(obj, finalizer)) return obj;
  return writer.set(kind, obj, [...(obj.metadata.finalizers ?? []), finalizer]);
}

/**
 * The finalizer removed; an object gone already is done. That is a second reconcile of one
 * deletion (enqueued by its Secret's removal, say) that read the cache before the first one's
 * removal reached it: a 404 there was retried and logged as a failure on every delete.
 */
export async function removeFinalizer<K extends KindName>(writer: FinalizerWriter, kind: K, obj: GwObject<K>, finalizer: string): Promise<void> {
  if (!hasFinalizer(obj, finalizer)) return;
  try {
    await writer.set(kind, obj, (obj.metadata.finalizers ?? []).filter((f) => f !== finalizer));
  } catch (error) {
    if (!isNotFound(error)) throw error;
  }
}

/** The reference that makes `owner` the controller of an object it writes: garbage-collected with it, never blocking its deletion. */
export function controllerReference(owner: GwObject): V1OwnerReference {
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name: owner.metadata.name,
    uid: owner.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: false,
  };
}

/** The uid of an object's controller, if it has one. */
export const controllerUid = (obj: { metadata?: { ownerReferences?: V1OwnerReference[] } }): string | undefined =>
  obj.metadata?.ownerReferences?.find((ref) => ref.controller)?.uid;

export const isNotFound = (error: unknown): boolean => error instanceof ApiException && error.code === 404;

export const isConflict = (error: unknown): boolean => error instanceof ApiException && error.code === 409;
