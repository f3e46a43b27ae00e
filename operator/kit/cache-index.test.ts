import { describe, expect, it } from 'vitest';
import type { KubernetesObject } from '@kubernetes/client-node';
import { MemorySource } from '../controllers/fakes.ts';
import { CacheIndex } from './cache-index.ts';
import type { Source } from './watch.ts';

interface Labelled extends KubernetesObject {
  metadata: { namespace: string; name: string };
  spec: { labels: string[] };
}

const thing = (namespace: string, name: string, labels: string[]): Labelled => ({ metadata: { namespace, name }, spec: { labels } });
const names = (objects: Labelled[]): string[] => objects.map((o) => `${o.metadata.namespace}/${o.metadata.name}`).sort();

describe('CacheIndex', () => {
  it('finds what the cache held when it was built and what came after, by any of its values', () => {
    const source = new MemorySource<Labelled>();
    source.put(thing('a', 'one', ['red', 'blue']));
    const index = new CacheIndex(source, (o) => o.spec.labels);
    source.put(thing('b', 'two', ['blue']));
    expect(names(index.get('blue'))).toEqual(['a/one', 'b/two']);
    expect(names(index.get('red'))).toEqual(['a/one']);
    expect(index.get('green')).toEqual([]);
    expect([index.has('blue'), index.has('green')]).toEqual([true, false]);
  });

  it('narrows to a namespace when asked', () => {
    const source = new MemorySource<Labelled>();
    const index = new CacheIndex(source, (o) => o.spec.labels);
    source.put(thing('a', 'one', ['blue']));
    source.put(thing('b', 'one', ['blue']));
    expect(names(index.get('blue', 'b'))).toEqual(['b/one']);
    expect(index.get('blue', 'c')).toEqual([]);
  });

  it('moves an object that changes its values, and forgets one deleted or left with none', () => {
    const source = new MemorySource<Labelled>();
    const index = new CacheIndex(source, (o) => o.spec.labels);
    source.put(thing('a', 'one', ['red', 'red', 'blue']));
    source.put(thing('a', 'two', ['red']));
    source.put(thing('a', 'one', ['green']));
    expect(names(index.get('red'))).toEqual(['a/two']);
    expect(index.has('blue')).toBe(false);
    expect(names(index.get('green'))).toEqual(['a/one']);
    source.remove('a', 'two');
    source.put(thing('a', 'one', []));
    expect([index.has('red'), index.has('green')]).toEqual([false, false]);
  });

  it('gives the cached version of an object, also one whose change it was not told of', () => {
    const source = new MemorySource<Labelled>();
    let cached = thing('a', 'one', ['blue']);
    // The operator's own writes reach the cache without an event (operator/kit/own-writes.ts).
    const quiet: Source<Labelled> = { get: () => cached, list: () => [], on: (handler) => source.on(handler), onCached: (handler) => source.onCached(handler) };
    const index = new CacheIndex(quiet, (o) => o.spec.labels);
    source.put(cached);
    cached = { ...thing('a', 'one', ['blue']), status: { seen: true } } as Labelled;
    expect(index.get('blue')).toEqual([cached]);
  });

  it('follows every change of the cache, the operator\'s own writes included, which the controllers are not told of', () => {
    const source = new MemorySource<Labelled>();
    const controllersTold: string[] = [];
    // As an informer with own writes: the cache's handlers see the change, the controllers' do not.
    const ownWrites: Source<Labelled> = { get: (ns, name) => source.get(ns, name), list: (ns) => source.list(ns), on: () => undefined, onCached: (handler) => source.onCached(handler) };
    ownWrites.on((event) => controllersTold.push(event.object.metadata.name));
    const index = new CacheIndex(ownWrites, (o) => o.spec.labels);
    source.put(thing('a', 'one', ['blue']));
    source.put(thing('a', 'one', ['red']));
    expect([names(index.get('red')), index.has('blue'), controllersTold]).toEqual([['a/one'], false, []]);
  });
});
