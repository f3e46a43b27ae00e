import type { KubernetesObject } from '@kubernetes/client-node';
import { flatKey } from '../../common/flat-key.ts';

const idOf = (kind: string, obj: KubernetesObject): string => flatKey(kind, obj.metadata?.namespace ?? '', obj.metadata?.name ?? '');

/** More versions of one object than one reconcile writes (a finalizer and a status). */
const VERSIONS_KEPT = 4;

/**
 * The versions of objects this operator wrote itself, as the API server answered each
 * write (the "expectations" of Kubernetes' own controllers). The watch event of such a
 * version tells the controllers nothing the reconcile that wrote it did not already act
 * on: informers keep it in their cache without handing it on, and a reconcile that the
 * event caught still running is not run again for it (the event often comes before the
 * write's own answer). Without this a Key's finalizer, Secret and status would each ask
 * for another reconcile of that Key. An external change always has a version of its own.
 * The last few versions written of each object are kept, until seen or the object is deleted.
 */
export class OwnWrites {
  readonly #versions = new Map<string, string[]>();

  record(kind: string, obj: KubernetesObject): void {
    const version = obj.metadata?.resourceVersion;
    if (!version) return;
    const id = idOf(kind, obj);
    const versions = this.#versions.get(id) ?? [];
    versions.push(version);
    if (versions.length > VERSIONS_KEPT) versions.shift();
    this.#versions.set(id, versions);
  }

  /** Whether `obj` is a version written here; each is recognised once. */
  take(kind: string, obj: KubernetesObject): boolean {
    const id = idOf(kind, obj);
    const versions = this.#versions.get(id);
    const at = versions?.indexOf(obj.metadata?.resourceVersion ?? '') ?? -1;
    if (!versions || at < 0) return false;
    versions.splice(at, 1);
    if (versions.length === 0) this.#versions.delete(id);
    return true;
  }

  forget(kind: string, obj: KubernetesObject): void {
    this.#versions.delete(idOf(kind, obj));
  }
}
