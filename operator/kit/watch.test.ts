import type { KubernetesObject } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { MemorySource } from '../controllers/fakes.ts';
import type { Request } from './reconciler.ts';
import { forObjects, specChanged, watchEvents } from './watch.ts';

type Obj = KubernetesObject & { spec?: object; status?: object };

const object = (metadata: Obj['metadata'], status?: object): Obj => ({ metadata: { namespace: 'ns', name: 'a', generation: 1, ...metadata }, spec: {}, status });

describe("a controller's watch of its own kind", () => {
  const watched = () => {
    const source = new MemorySource<Obj>();
    const requests: Request[] = [];
    forObjects(source).subscribe((request) => requests.push(request));
    return { source, requests };
  };

  it('skips an update that changed only the status, the write every reconcile ends with', () => {
    const { source, requests } = watched();
    source.put(object({}));
    source.put(object({ resourceVersion: '2' }, { conditions: [{ type: 'Ready', status: 'True' }] }));
    expect(requests).toEqual([{ namespace: 'ns', name: 'a' }]);
  });

  it('enqueues a new generation, a deletion request, and changes of finalizers, labels, annotations or owners', () => {
    const changes: Array<Obj['metadata']> = [
      { generation: 2 },
      { deletionTimestamp: new Date('2026-11-24T00:00:00Z') },
      { finalizers: ['gw.dev/cleanup'] },
      { labels: { tier: 'gold' } },
      { annotations: { 'gw.dev/retain': 'true' } },
      { ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'o', uid: 'u' }] },
    ];
    for (const change of changes) {
      const { source, requests } = watched();
      source.put(object({}));
      source.put(object(change));
      expect(requests, JSON.stringify(change)).toHaveLength(2);
    }
  });

  it('takes an object made again under its name in a watch gap, which the re-list reports as an update, for a delete and an add', () => {
    const { source, requests } = watched();
    const before = object({ uid: 'first', resourceVersion: '5' }, { conditions: [{ type: 'Ready', status: 'True' }] });
    source.put(before);
    // Its generation is back at 1 and the status is empty: alike, it would read as a status write.
    const again = object({ uid: 'second', resourceVersion: '9' });
    expect(watchEvents('Thing', 'update', again, before)).toEqual([
      { kind: 'Thing', verb: 'delete', object: before, old: before },
      { kind: 'Thing', verb: 'add', object: again, old: undefined },
    ]);
    source.put(again);
    // The first add's request, then the delete's and the add's (a status write would have made none).
    expect(requests).toHaveLength(3);
    expect(specChanged(watchEvents('Thing', 'update', again, before)[1]!)).toBe(true);
  });

  it('enqueues a delete, and an add', () => {
    const { source, requests } = watched();
    source.put(object({}));
    source.remove('ns', 'a');
    expect(requests).toHaveLength(2);
  });
});
