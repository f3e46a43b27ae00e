import { ApiException, CoordinationV1Api, CoreV1Api, V1MicroTime } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, startOperator, waitFor } from './support.ts';

const reconcileCount = async (operator: Operator): Promise<number> => {
  const metric = await operator.metrics.reconciles.get();
  return metric.values.reduce((sum, v) => sum + v.value, 0);
};

describe('operator: leader election', () => {
  const kc = kubeConfig();
  const c = client(kc);
  const leases = kc.makeApiClient(CoordinationV1Api);
  let ns: string;
  const running: Operator[] = [];

  const start = async (instanceId: string, namespace: string, webhookService?: string) => {
    const operator = await startOperator(kc, {
      webhookService,
      redisUrl: testEnv().redisUrl,
      watchNamespaces: namespace,
      namespace,
      instanceId,
      leaderElection: 'true',
      leaseDurationSeconds: 2,
    });
    running.push(operator);
    return operator;
  };
  const holder = async (namespace: string) => (await leases.readNamespacedLease({ namespace, name: 'gw-operator-leader' })).spec?.holderIdentity;
  const apiIn = (namespace: string, name: string) =>
    c.create('ApiDefinition', namespace, {
      metadata: { name },
      spec: { api_id: `${namespace}-${name}`, use_keyless: true, proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' } },
    });

  beforeAll(async () => {
    ns = await createNamespace('operator-lease');
  });

  afterAll(async () => {
    await Promise.all(running.map((operator) => operator.stop()));
  });

  it('elects one leader of two, and the second takes over when the first stops', async () => {
    const a = await start('op-a', ns);
    const b = await start('op-b', ns);
    const leader = await waitFor('a leader', async () => (a.isLeader() ? a : b.isLeader() ? b : undefined));
    const follower = leader === a ? b : a;
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect([a.isLeader(), b.isLeader()].filter(Boolean)).toHaveLength(1);
    expect(await holder(ns)).toBe(leader.options.instanceId);

    await apiIn(ns, 'first');
    await waitFor('first ConfigMap', () => c.configMap(ns, 'gw-api-first'));
    expect(await reconcileCount(follower)).toBe(0);

    await leader.stop();
    running.splice(running.indexOf(leader), 1);
    await waitFor('follower leads', async () => follower.isLeader(), 10_000);
    expect(await holder(ns)).toBe(follower.options.instanceId);
    await apiIn(ns, 'second');
    await waitFor('second ConfigMap from the new leader', () => c.configMap(ns, 'gw-api-second'));
  });

  it('waits out a lease held by a vanished holder, then takes it', async () => {
    const other = await createNamespace('operator-lease');
    const now = new V1MicroTime();
    await leases.createNamespacedLease({
      namespace: other,
      body: { metadata: { name: 'gw-operator-leader' }, spec: { holderIdentity: 'ghost', leaseDurationSeconds: 3, acquireTime: now, renewTime: now } },
    });
    const started = Date.now();
    const operator = await start('op-c', other);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(operator.isLeader()).toBe(false);
    expect(await holder(other)).toBe('ghost');
    await waitFor('takes over after expiry', async () => operator.isLeader(), 15_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(3_000);
    const lease = await leases.readNamespacedLease({ namespace: other, name: 'gw-operator-leader' });
    expect(lease.spec?.holderIdentity).toBe('op-c');
    expect(lease.spec?.leaseTransitions).toBe(1);
  });

  // helm uninstall deletes the Service before the operator pods are gone: a replica still
  // campaigning must not create a Lease that nothing owns and that would outlive the release.
  it('takes no lease while the release\'s Service is gone, and one owned by it once it exists', async () => {
    const other = await createNamespace('operator-lease');
    const operator = await start('op-d', other, 'gw-webhook');
    const leaseExists = async () => leases.readNamespacedLease({ namespace: other, name: 'gw-operator-leader' }).then(
      () => true,
      (error: unknown) => {
        if (error instanceof ApiException && error.code === 404) return false;
        throw error;
      },
    );
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(operator.isLeader()).toBe(false);
    expect(await leaseExists()).toBe(false);

    const service = await kc.makeApiClient(CoreV1Api).createNamespacedService({
      namespace: other,
      body: { metadata: { name: 'gw-webhook' }, spec: { ports: [{ port: 443 }] } },
    });
    await waitFor('leads once the Service exists', async () => operator.isLeader(), 15_000);
    const lease = await leases.readNamespacedLease({ namespace: other, name: 'gw-operator-leader' });
    expect(lease.metadata?.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Service', name: 'gw-webhook', uid: service.metadata?.uid }]);
  });
});
