import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { startControlPlane, startRedis, type ControlPlaneHandle, type RedisHandle } from '../../harness/index.ts';
import { client, ready, startOperator, waitFor } from './support.ts';

describe('operator: API server restart', () => {
  let plane: ControlPlaneHandle;
  let redis: RedisHandle;
  let operator: Operator;
  let c: ReturnType<typeof client>;

  beforeAll(async () => {
    // A control plane of its own: restarting the shared one would disturb other tests.
    [plane, redis] = await Promise.all([startControlPlane(), startRedis()]);
    const kc = new KubeConfig();
    kc.loadFromFile(plane.kubeconfig);
    c = client(kc);
    await c.core.createNamespace({ body: { metadata: { name: 'restart' } } });
    // Its own control plane holds nothing else, so this operator watches all namespaces.
    operator = await startOperator(kc, { redisUrl: redis.url, leaderElection: 'true', namespace: 'restart', leaseDurationSeconds: 5 });
  });

  afterAll(async () => {
    await operator?.stop();
    await Promise.allSettled([plane?.stop(), redis?.dispose()]);
  });

  const api = (name: string) =>
    c.create('ApiDefinition', 'restart', {
      metadata: { name },
      spec: { api_id: `restart-${name}`, use_keyless: true, proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' } },
    });

  it('watches every namespace when given none, and keeps reconciling after the API server restarts', async () => {
    expect(operator.options.watchNamespaces).toEqual([]);
    await waitFor('leader', async () => operator.isLeader());
    await api('before');
    await waitFor('before ConfigMap', () => c.configMap('restart', 'gw-api-before'));

    await plane.restartApiServer();

    await waitFor('API server back', async () => (await c.core.readNamespace({ name: 'restart' })).metadata?.name === 'restart', 60_000);
    await api('after');
    await waitFor('after ConfigMap', () => c.configMap('restart', 'gw-api-after'), 60_000);
    const after = await waitFor('after Ready', async () => {
      const obj = await c.get('ApiDefinition', 'restart', 'after');
      return ready(obj)?.status === 'True' ? obj : undefined;
    });
    expect(after.status?.configMap).toBe('gw-api-after');
    await c.core.deleteNamespacedConfigMap({ namespace: 'restart', name: 'gw-api-before' });
    await waitFor('before ConfigMap restored after restart', () => c.configMap('restart', 'gw-api-before'), 30_000);
    expect(operator.isLeader()).toBe(true);
  });
});
