import type { Source } from '../kit/watch.ts';
import type { GwObject } from '../runtime/gw-object.ts';

type Key = GwObject<'Key'>;

/** A Key's `namespace/name`. */
export const refOf = (key: Key): string => `${key.metadata.namespace}/${key.metadata.name}`;
const createdAt = (key: Key): number => new Date(key.metadata.creationTimestamp ?? 0).getTime();

/**
 * The Keys that name each `spec.key_hash` (admin-made keys), kept from the Key cache's events.
 * Two Keys naming one hash would each write the one session in turn, every resync; the oldest
 * holds it (operator/controllers/key-controller.ts), and this finds the others without a scan
 * of every Key per reconcile.
 */
export class KeyHashIndex {
  readonly #keys: Source<Key>;
  /** "namespace/name" of the Keys naming each hash. */
  readonly #byHash = new Map<string, Set<string>>();
  /** The hash each Key names, to drop it from its old hash when it changes. */
  readonly #hashOf = new Map<string, string>();

  constructor(keys: Source<Key>) {
    this.#keys = keys;
    for (const key of keys.list()) this.#index(key);
    keys.on((event) => (event.verb === 'delete' ? this.#drop(refOf(event.object)) : this.#index(event.object)));
  }

  /** The Keys naming `hash` in their spec, `except` one. */
  othersNaming(hash: string, except: Key): Key[] {
    const refs = this.#byHash.get(hash);
    if (refs === undefined || refs.size < 2) return [];
    const own = refOf(except);
    return [...refs].filter((ref) => ref !== own).flatMap((ref) => {
      const [namespace = '', name = ''] = ref.split('/');
      return this.#keys.get(namespace, name) ?? [];
    });
  }

  /**
   * The Key whose session `hash` is: the oldest naming it that is not being deleted (then the
   * first by namespace/name), or undefined when every one is going.
   */
  holder(hash: string, asking: Key): Key | undefined {
    const live = [asking, ...this.othersNaming(hash, asking)].filter((key) => !key.metadata.deletionTimestamp);
    return live.sort((a, b) => createdAt(a) - createdAt(b) || refOf(a).localeCompare(refOf(b)))[0];
  }

  #index(key: Key): void {
    const ref = refOf(key);
    const hash = key.spec.key_hash;
    if (this.#hashOf.get(ref) === hash) return;
    this.#drop(ref);
    if (hash === undefined) return;
    this.#hashOf.set(ref, hash);
    const refs = this.#byHash.get(hash) ?? new Set<string>();
    refs.add(ref);
    this.#byHash.set(hash, refs);
  }

  #drop(ref: string): void {
    const hash = this.#hashOf.get(ref);
    if (hash === undefined) return;
    this.#hashOf.delete(ref);
    const refs = this.#byHash.get(hash);
    refs?.delete(ref);
    if (refs?.size === 0) this.#byHash.delete(hash);
  }
}
