import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { startControlPlane, type ControlPlaneHandle } from '../../harness/index.ts';
import { call, compiledApi, compiledConfig, eventually, servesApi, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';

describe('Kubernetes config source across an API server restart', () => {
  let plane: ControlPlaneHandle;
  let kc: KubeConfig;
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  const namespace = uniqueId('sc-reconnect');

  beforeAll(async () => {
    plane = await startControlPlane();
    kc = new KubeConfig();
    kc.loadFromFile(plane.kubeconfig);
    await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
    upstream = await startEchoUpstream();
    sidecar = await startTestSidecar({ ...sidecarOptions(namespace), kubeconfig: plane.kubeconfig }, { kubeConfig: kc });
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
    await plane?.stop();
  });

  it('keeps serving while the API server is away and picks up changes after it returns', async () => {
    const api = compiledApi(uniqueId('api'), `${upstream.url}/v1`);
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api])), kc);
    await eventually(servesApi(sidecar, api.api_id));

    await plane.restartApiServer();
    expect((await call(`${sidecar.proxyUrl}/${api.api_id}/x`)).status).toBe(200);

    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([{ ...api, target_url: `${upstream.url}/v2` }])), kc);
    await eventually(
      async () => {
        const res = await call(`${sidecar.proxyUrl}/${api.api_id}/x`);
        return (res.json() as { path?: string }).path === '/v2/x';
      },
      60_000,
      'change after reconnect',
    );
  });
});
