import type { KubernetesObject } from '@kubernetes/client-node';
import type { Source } from './watch.ts';

const noNames: ReadonlySet<string> = new Set();

/**
 * A secondary index of a cache, as a client-go Indexer or a controller-runtime field index
 * gives: the objects whose `valuesOf` includes a value, found without a scan of the whole
 * kind. With 10,000 Keys, a scan of them per API event or per Policy reconcile made the cold
 * start quadratic (docs/architecture.md#operator-at-scale).
 *
 * It keeps names, not objects, and reads each from the cache when asked: the cache holds the
 * newest version even where its event was not passed on (the operator's own writes, see
 * operator/kit/own-writes.ts), and `valuesOf` reads only the spec, which those writes leave
 * alone. The names are the cached objects' own strings and `valuesOf` may return an array of
 * the object's own, so 100,000 Keys cost an index a few map entries each, not new strings.
 * Build it before the watches that read it subscribe, so that it has taken each event before
 * they map it.
 */
export class CacheIndex<T extends KubernetesObject> {
  readonly #source: Source<T>;
  readonly #valuesOf: (obj: T) => readonly string[];
  /** The names under each value, by namespace. */
  readonly #byValue = new Map<string, Map<string, Set<string>>>();
  /** The values each object is under, by namespace and name: to take it out of them when it changes or goes. */
  readonly #indexed = new Map<string, Map<string, readonly string[]>>();

  constructor(source: Source<T>, valuesOf: (obj: T) => readonly string[]) {
    this.#source = source;
    this.#valuesOf = valuesOf;
    for (const obj of source.list()) this.#index(obj);
    source.onCached((event) => (event.verb === 'delete' ? this.#drop(event.object) : this.#index(event.object)));
  }

  /** The cached objects under `value` (in `namespace` only, when given), in no particular order. */
  get(value: string, namespace?: string): T[] {
    const byNamespace = this.#byValue.get(value);
    if (byNamespace === undefined) return [];
    const found: T[] = [];
    const take = (ns: string, names: ReadonlySet<string>): void => {
      for (const name of names) {
        const obj = this.#source.get(ns, name);
        if (obj !== undefined) found.push(obj);
      }
    };
    if (namespace === undefined) for (const [ns, names] of byNamespace) take(ns, names);
    else take(namespace, byNamespace.get(namespace) ?? noNames);
    return found;
  }

  /** The names of the objects of `namespace` under `value`: where a controller needs no more, this reads no object. */
  namesIn(value: string, namespace: string): ReadonlySet<string> {
    return this.#byValue.get(value)?.get(namespace) ?? noNames;
  }

  /** Whether any object is under `value`. */
  has(value: string): boolean {
    return this.#byValue.has(value);
  }

  #index(obj: T): void {
    const { namespace = '', name = '' } = obj.metadata ?? {};
    const values = this.#valuesOf(obj);
    const before = this.#indexed.get(namespace)?.get(name);
    if (before !== undefined && before.length === values.length && before.every((value, i) => value === values[i])) return;
    this.#drop(obj);
    if (values.length === 0) return;
    let inNamespace = this.#indexed.get(namespace);
    if (inNamespace === undefined) this.#indexed.set(namespace, (inNamespace = new Map()));
    inNamespace.set(name, values);
    for (const value of values) {
      let byNamespace = this.#byValue.get(value);
      if (byNamespace === undefined) this.#byValue.set(value, (byNamespace = new Map()));
      let names = byNamespace.get(namespace);
      if (names === undefined) byNamespace.set(namespace, (names = new Set()));
      names.add(name);
    }
  }

  #drop(obj: T): void {
    const { namespace = '', name = '' } = obj.metadata ?? {};
    const inNamespace = this.#indexed.get(namespace);
    const values = inNamespace?.get(name);
    if (inNamespace === undefined || values === undefined) return;
    inNamespace.delete(name);
    if (inNamespace.size === 0) this.#indexed.delete(namespace);
    for (const value of values) {
      const byNamespace = this.#byValue.get(value);
      const names = byNamespace?.get(namespace);
      if (byNamespace === undefined || names === undefined) continue;
      names.delete(name);
      if (names.size === 0) byNamespace.delete(namespace);
      if (byNamespace.size === 0) this.#byValue.delete(value);
    }
  }
}
