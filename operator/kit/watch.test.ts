import type { KubernetesObject } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { MemorySource } from '../controllers/fakes.ts';
import type { Request } from './reconciler.ts';
import { forObjects } from './watch.ts';

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

  it('enqueues a delete, and an add', () => {
    const { source, requests } = watched();
    source.put(object({}));
    source.remove('ns', 'a');
    expect(requests).toHaveLength(2);
  });
});
