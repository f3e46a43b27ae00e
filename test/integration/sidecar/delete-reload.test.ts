import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { RETAIN_ANNOTATION } from '../../../common/compiled-config-map.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { call, compiledApi, compiledConfig, eventually, servesApi, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';

/**
 * docs/behaviour.md#api-states in a cluster: DELETE /gw/apis/{id} removes the ApiDefinition but every sidecar
 * keeps serving the API until GET /gw/reload on any sidecar, after which all unload it.
 * (No operator runs here: the test writes the ConfigMap the operator would write.)
 */
describe('admin delete, then served until reload (Kubernetes)', () => {
  let upstream: EchoUpstream;
  let first: RunningSidecar;
  let second: RunningSidecar;
  let namespace: string;
  const admin = { 'x-gw-authorization': 'test-admin-secret' };

  beforeAll(async () => {
    namespace = await createNamespace('sc-delete');
    upstream = await startEchoUpstream();
    first = await startTestSidecar(sidecarOptions(namespace));
    second = await startTestSidecar(sidecarOptions(namespace));
  });

  afterAll(async () => {
    await first?.close();
    await second?.close();
    await upstream?.close();
  });

  it('keeps serving a deleted API on every sidecar until one reloads', async () => {
    const apiId = uniqueId('del');
    const manifest = {
      apiVersion: 'gw.dev/v1alpha1',
      kind: 'ApiDefinition',
      metadata: { name: apiId, namespace },
      spec: { api_id: apiId, name: apiId, use_keyless: true, proxy: { listen_path: `/${apiId}/`, target_url: upstream.url, strip_listen_path: true } },
    };
    const applied = await kubectl(['apply', '-f', '-'], { input: JSON.stringify(manifest) });
    expect(applied.code, applied.stderr).toBe(0);
    await writeConfigMap(namespace, apiId, JSON.stringify(compiledConfig([compiledApi(apiId, upstream.url)])));
    await eventually(() => servesApi(first, apiId)() && servesApi(second, apiId)());

    const deleted = await call(`${first.adminUrl}/gw/apis/${apiId}`, { method: 'DELETE', headers: admin });
    expect(deleted.status).toBe(200);
    expect(deleted.json()).toEqual({ key: apiId, status: 'ok', action: 'deleted' });
    expect((await kubectl(['get', 'apidefinitions', apiId, '-n', namespace], { allowFail: true })).code).not.toBe(0);
    const core = kubeConfig().makeApiClient(CoreV1Api);
    const cm = await core.readNamespacedConfigMap({ name: `gw-api-${apiId}`, namespace });
    expect(cm.metadata?.annotations?.[RETAIN_ANNOTATION]).toBe('true');
    await new Promise((resolve) => setTimeout(resolve, 300));
    for (const sidecar of [first, second]) expect((await call(`${sidecar.proxyUrl}/${apiId}/`)).status).toBe(200);

    const reloaded = await call(`${first.adminUrl}/gw/reload`, { headers: admin });
    expect(reloaded.status).toBe(200);
    expect((await call(`${first.proxyUrl}/${apiId}/`)).status).toBe(404);
    await eventually(() => !servesApi(second, apiId)(), 10_000, 'second sidecar unloads');
    expect((await call(`${second.proxyUrl}/${apiId}/`)).status).toBe(404);
  });
});
