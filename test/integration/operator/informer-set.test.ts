import { CoreV1Api, CustomObjectsApi, type KubernetesObject } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { kinds } from '../../../crds/kinds.ts';
import { InformerSet } from '../../../operator/runtime/informer-set.ts';
import { configMapType, customResourceType, type ListPage, type ResourceType } from '../../../operator/runtime/resources.ts';
import { createNamespace, kubeConfig } from '../../harness/index.ts';
import { waitFor } from '../../support/wait-for.ts';

const labels = { 'gw.dev/test': 'pages' };

/**
 * The operator's caches list page by page (operator/runtime/informer-set.ts), so a list of
 * 100,000 Keys never sits in memory whole; on the real API server the pages must add up to
 * the whole list, and the watch must go on from the list's version. A core list (typed by
 * the client) and a custom resource's (plain JSON) carry the continue token differently, so
 * both are held here.
 */
describe('operator: the informer cache lists in pages', () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  let informers: InformerSet<KubernetesObject> | undefined;
  afterEach(async () => {
    await informers?.stop();
    informers = undefined;
  });

  const { group, version, plural } = kinds.Policy;
  const cases: Array<{ kind: string; type: () => ResourceType; create: (namespace: string, name: string) => Promise<unknown>; remove: (namespace: string, name: string) => Promise<unknown> }> = [
    {
      kind: 'ConfigMap',
      type: () => configMapType(kc),
      create: (namespace, name) => core.createNamespacedConfigMap({ namespace, body: { metadata: { name, labels }, data: { name } } }),
      remove: (namespace, name) => core.deleteNamespacedConfigMap({ namespace, name }),
    },
    {
      kind: 'Policy',
      type: () => customResourceType(kc, kinds.Policy),
      create: (namespace, name) =>
        custom.createNamespacedCustomObject({ group, version, namespace, plural, body: { apiVersion: `${group}/${version}`, kind: 'Policy', metadata: { name, labels }, spec: { rate: 10, per: 60 } } }),
      remove: (namespace, name) => custom.deleteNamespacedCustomObject({ group, version, namespace, plural, name }),
    },
  ];

  it.each(cases)('$kind: reads every page, trims each object, and watches from where the list ended', async ({ type, create, remove }) => {
    const namespace = await createNamespace('informer-pages');
    for (let i = 0; i < 7; i++) await create(namespace, `obj-${i}`);
    const real = type();
    const pages: ListPage[] = [];
    const recording: ResourceType = { ...real, list: (ns, page) => (pages.push(page), real.list(ns, page)) };

    informers = new InformerSet<KubernetesObject>(kc, recording, [namespace], pino({ level: 'silent' }), { labelSelector: 'gw.dev/test=pages', listPageSize: 3 });
    await informers.start();

    expect(pages.map((p) => [p.limit, p.continue === undefined])).toEqual([[3, true], [3, false], [3, false]]);
    const cached = informers.list(namespace);
    expect(cached.map((object) => object.metadata?.name).sort()).toEqual(['obj-0', 'obj-1', 'obj-2', 'obj-3', 'obj-4', 'obj-5', 'obj-6']);
    expect(cached.every((object) => object.metadata?.managedFields === undefined)).toBe(true);

    await create(namespace, 'obj-7');
    await remove(namespace, 'obj-0');
    await waitFor('the watch saw the create and the delete', async () => informers!.get(namespace, 'obj-7') !== undefined && informers!.get(namespace, 'obj-0') === undefined);
    expect(informers.list(namespace)).toHaveLength(7);
  });
});
