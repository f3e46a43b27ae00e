import { CoreV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { KubeConfigMapWriter } from '../../../operator/config/config-map-writer.ts';
import { OwnWrites } from '../../../operator/kit/own-writes.ts';
import { createNamespace, kubeConfig } from '../../harness/index.ts';

/**
 * The operator decides to delete a compiled ConfigMap from its cached copy; the admin
 * DELETE may have marked it retained since (docs/behaviour.md#api-states). The delete must
 * then leave the newer version alone, on the real API server.
 */
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
});
