import { CoreV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { KubeConfigMapWriter } from '../../../operator/config/config-map-writer.ts';
import { OwnWrites } from '../../../operator/kit/own-writes.ts';
import { createNamespace, kubeConfig } from '../../harness/index.ts';

/**
 * The operator decides to delete a compiled ConfigMap from its cached copy; the admin
 * DELETE may have marked it retained since (docs/behaviour.md#api-states). A delete or a
 * rewrite must then leave the newer version alone, on the real API server.
 */
const MANAGED = { 'app.kubernetes.io/managed-by': 'gw-operator' };

describe('operator: the compiled ConfigMap writer', () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const writer = new KubeConfigMapWriter(kc, new OwnWrites());

  it('deletes the version it read, and not one changed since', async () => {
    const namespace = await createNamespace('cm-writer');
    const name = 'gw-api-orders';
    const read = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name }, data: { 'config.json': '{}' } } });
    const body = { metadata: { annotations: { 'gw.dev/retain-until-reload': 'true' } } };
    const marked = await core.patchNamespacedConfigMap({ namespace, name, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));

    expect(await writer.delete(namespace, name, read.metadata?.resourceVersion)).toBe('changed');
    const kept = await core.readNamespacedConfigMap({ namespace, name });
    expect(kept.metadata?.annotations?.['gw.dev/retain-until-reload']).toBe('true');

    expect(await writer.delete(namespace, name, marked.metadata?.resourceVersion)).toBe('deleted');
    await expect(core.readNamespacedConfigMap({ namespace, name })).rejects.toMatchObject({ code: 404 });
    expect(await writer.delete(namespace, name, marked.metadata?.resourceVersion)).toBe('deleted');
  });

  it('rewrites the version it read, and not one changed since; creates only what does not exist', async () => {
    const namespace = await createNamespace('cm-writer');
    const name = 'gw-api-orders';
    const desired = (json: string) => ({ metadata: { name, namespace, labels: MANAGED }, data: { 'config.json': json } });
    expect(await writer.apply(desired('{"v":1}'), undefined)).toBe('created');
    const read = await core.readNamespacedConfigMap({ namespace, name });
    expect(await writer.apply(desired('{"v":1}'), undefined)).toBe('changed');

    const body = { metadata: { annotations: { 'gw.dev/retain-until-reload': 'true' } } };
    const marked = await core.patchNamespacedConfigMap({ namespace, name, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    expect(await writer.apply(desired('{"v":2}'), read)).toBe('changed');
    const kept = await core.readNamespacedConfigMap({ namespace, name });
    expect([kept.metadata?.annotations?.['gw.dev/retain-until-reload'], kept.data?.['config.json']]).toEqual(['true', '{"v":1}']);

    expect(await writer.apply(desired('{"v":2}'), marked)).toBe('updated');
    expect((await core.readNamespacedConfigMap({ namespace, name })).data?.['config.json']).toBe('{"v":2}');
    await core.deleteNamespacedConfigMap({ namespace, name });
    expect(await writer.apply(desired('{"v":3}'), marked)).toBe('changed');
  });

  it("leaves a ConfigMap of the name that is someone else's as it is, and takes back its own whose label was removed by hand", async () => {
    const namespace = await createNamespace('cm-writer');
    const owner = { apiVersion: 'gw.dev/v1alpha1', kind: 'ApiDefinition', name: 'orders', uid: '0f5a8d3e-1111-4222-8333-944455556666', controller: true };
    const desired = { metadata: { name: 'gw-api-orders', namespace, labels: MANAGED, ownerReferences: [owner] }, data: { 'config.json': '{"v":1}' } };
    const foreign = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'gw-api-orders' }, data: { 'config.json': '{"hand":1}' } } });
    expect(await writer.apply(desired, undefined)).toBe('taken');
    expect(await core.readNamespacedConfigMap({ namespace, name: 'gw-api-orders' })).toMatchObject({ metadata: { resourceVersion: foreign.metadata?.resourceVersion }, data: { 'config.json': '{"hand":1}' } });

    await core.deleteNamespacedConfigMap({ namespace, name: 'gw-api-orders' });
    await core.createNamespacedConfigMap({ namespace, body: { ...desired, metadata: { ...desired.metadata, labels: {} }, data: { 'config.json': '{"edited":1}' } } });
    expect(await writer.apply(desired, undefined)).toBe('updated');
    expect(await core.readNamespacedConfigMap({ namespace, name: 'gw-api-orders' })).toMatchObject({ metadata: { labels: MANAGED }, data: { 'config.json': '{"v":1}' } });
  });
});
