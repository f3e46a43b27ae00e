import { CoreV1Api, CustomObjectsApi, KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { group, kinds, version } from '../../../crds/kinds.ts';
import { KubernetesResourceStore } from '../../../sidecar/resources/kubernetes-store.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { serviceAccountToken } from '../../support/service-account.ts';
import { startAdmin, type AdminServer } from './admin-client.ts';
import { ADMIN_SECRET, clusterDeps, connected, stallingKubeConfig, testRedis, unreachableKubeConfig, type TestDeps } from './fixtures.ts';

const auth: [string, string] = ['X-GW-Authorization', ADMIN_SECRET];
const plural = kinds.ApiDefinition.plural;

const api = (namespace: string, name: string): string => `
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${name}, namespace: ${namespace} }
spec:
  api_id: ${name}-id
  use_keyless: true
  proxy: { listen_path: /${name}/, target_url: http://127.0.0.1:9000 }
`;

describe('DELETE /gw/apis/{apiID} and GET /gw/reload on the API server', () => {
  let namespace: string;
  let redis: Redis;
  let admin: AdminServer;
  let test: TestDeps;
  const core = kubeConfig().makeApiClient(CoreV1Api);
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);

  /** The compiled ConfigMap as the operator writes it: labelled, owned by its ApiDefinition. */
  async function compiledConfigMap(name: string): Promise<void> {
    const owner = (await custom.getNamespacedCustomObject({ group, version, namespace, plural, name })) as { metadata: { uid: string } };
    await core.createNamespacedConfigMap({
      namespace,
      body: {
        metadata: {
          name: `gw-api-${name}`,
          labels: { 'app.kubernetes.io/managed-by': 'gw-operator', 'gw.dev/api-id': `${name}-id` },
          annotations: { 'gw.dev/config-hash': 'abc' },
          ownerReferences: [{ apiVersion: 'gw.dev/v1alpha1', kind: 'ApiDefinition', name, uid: owner.metadata.uid, controller: true }],
        },
        data: { 'config.json': '{}' },
      },
    });
  }

  const configMap = async (name: string): Promise<V1ConfigMap | null> => {
    try {
      return await core.readNamespacedConfigMap({ namespace, name: `gw-api-${name}` });
    } catch {
      return null;
    }
  };
  const apiNames = async (): Promise<string[]> =>
    ((await custom.listNamespacedCustomObject({ group, version, namespace, plural })) as { items: { metadata: { name: string } }[] }).items
      .map((item) => item.metadata.name)
      .sort();

  beforeAll(async () => {
    namespace = await createNamespace('admin-delete');
    await kubectl(['apply', '-f', '-'], { input: [api(namespace, 'doomed'), api(namespace, 'keeper'), api(namespace, 'fresh')].join('---\n') });
    await compiledConfigMap('doomed');
    await compiledConfigMap('keeper');
    redis = await connected(testRedis());
    test = clusterDeps(namespace, redis);
    admin = await startAdmin(test.deps);
  });

  afterAll(async () => {
    await admin?.close();
    redis?.disconnect();
  });

  const refusals: [string, string, [string, string][], number, unknown][] = [
    ['no key', 'doomed-id', [], 403, { status: 'error', message: 'Attempted administrative access with invalid or missing key!' }],
    ['a wrong key', 'doomed-id', [['X-GW-Authorization', 'nope']], 403, { status: 'error', message: 'Attempted administrative access with invalid or missing key!' }],
    ['the key in Admin-Auth instead', 'doomed-id', [['Admin-Auth', ADMIN_SECRET]], 403, { status: 'error', message: 'Attempted administrative access with invalid or missing key!' }],
    ['the key twice', 'doomed-id', [auth, auth], 400, { status: 'error', message: expect.stringMatching(/more than once/) }],
    ['an unknown API', 'nope-id', [auth], 404, { status: 'error', message: 'API not found' }],
    ['a traversal id', '..%2F..%2Fkeeper-id', [auth], 400, { status: 'error', message: expect.stringMatching(/apiID/) }],
    ['an encoded dot-dot', '%2e%2e', [auth], 400, { status: 'error', message: expect.stringMatching(/apiID/) }],
    ['a NUL in the id', 'doomed-id%00', [auth], 400, { status: 'error', message: expect.stringMatching(/apiID/) }],
    ['a unicode id', 'd%C3%B6omed', [auth], 400, { status: 'error', message: expect.stringMatching(/apiID/) }],
    ['an over-long id', 'x'.repeat(300), [auth], 400, { status: 'error', message: expect.stringMatching(/apiID/) }],
  ];

  it.each(refusals)('refuses %s in the gateway shape and deletes nothing', async (_label, id, headers, status, body) => {
    const res = await admin.call('DELETE', `/gw/apis/${id}`, { headers });
    expect(res.status).toBe(status);
    expect(res.json).toEqual(body);
    expect(await apiNames()).toEqual(['doomed', 'fresh', 'keeper']);
    expect((await configMap('doomed'))?.metadata?.annotations?.['gw.dev/retain-until-reload']).toBeUndefined();
  });

  it('deletes the ApiDefinition and retains its ConfigMap until a reload', async () => {
    const owner = (await configMap('doomed'))?.metadata?.ownerReferences?.[0]?.uid;
    expect(owner).toBeDefined();
    const res = await admin.call('DELETE', '/gw/apis/doomed-id', { headers: [auth] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ key: 'doomed-id', status: 'ok', action: 'deleted' });
    expect(await apiNames()).toEqual(['fresh', 'keeper']);
    const retained = await configMap('doomed');
    expect(retained?.metadata?.annotations?.['gw.dev/retain-until-reload']).toBe('true');
    // Which ApiDefinition's delete retained it: one created again under the name has another uid.
    expect(retained?.metadata?.annotations?.['gw.dev/retained-for-uid']).toBe(owner);
    expect(retained?.metadata?.ownerReferences ?? []).toEqual([]);
    expect(retained?.data).toEqual({ 'config.json': '{}' });
    expect(test.reloads.count).toBe(0);

    const again = await admin.call('DELETE', '/gw/apis/doomed-id', { headers: [auth] });
    expect(again.status).toBe(404);
    expect(again.json).toEqual({ status: 'error', message: 'API not found' });
  });

  it('keeps the ConfigMap retained when deletes of one API race: one answers deleted, the others not found', async () => {
    await kubectl(['apply', '-f', '-'], { input: api(namespace, 'raced') });
    await compiledConfigMap('raced');
    const answers = await Promise.all(Array.from({ length: 5 }, () => admin.call('DELETE', '/gw/apis/raced-id', { headers: [auth] })));
    expect(answers.map((res) => res.status).sort()).toEqual([200, 404, 404, 404, 404]);
    expect(await apiNames()).not.toContain('raced');
    const retained = await configMap('raced');
    expect(retained?.metadata?.annotations?.['gw.dev/retain-until-reload']).toBe('true');
    expect(retained?.metadata?.ownerReferences ?? []).toEqual([]);
  });

  it('deletes an API the operator has not compiled yet (no ConfigMap)', async () => {
    const res = await admin.call('DELETE', '/gw/apis/fresh-id', { headers: [auth] });
    expect(res.status).toBe(200);
    expect(await apiNames()).toEqual(['keeper']);
  });

  it('deletes every ApiDefinition claiming the api_id, so a duplicate is not served in place of the deleted one', async () => {
    const twin = (name: string): string => api(namespace, name).replace(`api_id: ${name}-id`, 'api_id: twin-id');
    await kubectl(['apply', '-f', '-'], { input: [twin('twin-a'), twin('twin-b')].join('---\n') });
    expect(await apiNames()).toEqual(['keeper', 'twin-a', 'twin-b']);
    const res = await admin.call('DELETE', '/gw/apis/twin-id', { headers: [auth] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ key: 'twin-id', status: 'ok', action: 'deleted' });
    expect(await apiNames()).toEqual(['keeper']);
  });

  it('refuses a reload without the key and keeps the retained ConfigMap', async () => {
    const res = await admin.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', 'nope']] });
    expect(res.status).toBe(403);
    expect(res.json).toEqual({ status: 'error', message: 'Attempted administrative access with invalid or missing key!' });
    expect(await configMap('doomed')).not.toBeNull();
    expect(test.reloads.count).toBe(0);
  });

  it('reload deletes retained ConfigMaps of deleted APIs only, then reloads the gateway', async () => {
    // A retained mark on a ConfigMap whose API still exists must survive the reload.
    await core.patchNamespacedConfigMap({
      namespace,
      name: 'gw-api-keeper',
      body: [{ op: 'add', path: '/metadata/annotations/gw.dev~1retain-until-reload', value: 'true' }],
    });
    const res = await admin.call('GET', '/gw/reload?block=true', { headers: [auth] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ status: 'ok', message: '' });
    expect(await configMap('doomed')).toBeNull();
    expect(await configMap('keeper')).not.toBeNull();
    expect(test.reloads.count).toBe(1);
  });

  it('answers 500 "Delete failed" when the API server cannot be reached', async () => {
    const down = await startAdmin(clusterDeps(namespace, redis, { resources: new KubernetesResourceStore(unreachableKubeConfig(), [namespace]) }).deps);
    try {
      const res = await down.call('DELETE', '/gw/apis/keeper-id', { headers: [auth] });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ status: 'error', message: 'Delete failed' });
      expect(await apiNames()).toEqual(['keeper']);
    } finally {
      await down.close();
    }
  });

  it('answers a delete and a reload the API server stalls on with 500 within the deadline, having changed nothing', async () => {
    // Every request reaches the API server 2 s late; the operations give up after 400 ms.
    const stalled = await stallingKubeConfig(2_000);
    const slow = await startAdmin(clusterDeps(namespace, redis, { resources: new KubernetesResourceStore(stalled.kc, [namespace], { deadlineMs: 400 }) }).deps);
    try {
      const keeperMap = await configMap('keeper');
      for (const [method, path, answer] of [
        ['DELETE', '/gw/apis/keeper-id', { status: 'error', message: 'Delete failed' }],
        ['GET', '/gw/reload', { status: 'error', message: 'Reload failed' }],
      ] as const) {
        const started = Date.now();
        const res = await slow.call(method, path, { headers: [auth] });
        expect([path, res.status, res.json]).toEqual([path, 500, answer]);
        expect(Date.now() - started).toBeLessThan(1_500);
      }
      // Given up before it was sent: nothing lands once the stall ends.
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      expect(await apiNames()).toEqual(['keeper']);
      expect((await configMap('keeper'))?.metadata?.annotations).toEqual(keeperMap?.metadata?.annotations);
    } finally {
      await slow.close();
      await stalled.close();
    }
  });

  it('puts the ConfigMap back when the API server refuses the delete', async () => {
    // An account that may mark ConfigMaps but not delete ApiDefinitions: the delete fails after the mark.
    const token = await serviceAccountToken(namespace, 'half-admin', [
      { apiGroups: ['gw.dev'], resources: ['apidefinitions'], verbs: ['get', 'list'] },
      { apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'patch'] },
    ]);
    const cluster = kubeConfig().getCurrentCluster()!;
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [cluster],
      users: [{ name: 'half-admin', token }],
      contexts: [{ name: 'half-admin', cluster: cluster.name, user: 'half-admin' }],
      currentContext: 'half-admin',
    });
    await core.patchNamespacedConfigMap({
      namespace,
      name: 'gw-api-keeper',
      body: [{ op: 'remove', path: '/metadata/annotations/gw.dev~1retain-until-reload' }],
    });
    const before = await configMap('keeper');
    const limited = await startAdmin(clusterDeps(namespace, redis, { resources: new KubernetesResourceStore(kc, [namespace]) }).deps);
    try {
      const res = await limited.call('DELETE', '/gw/apis/keeper-id', { headers: [auth] });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ status: 'error', message: 'Delete failed' });
      expect(await apiNames()).toEqual(['keeper']);
      const after = await configMap('keeper');
      expect(after?.metadata?.annotations).toEqual(before?.metadata?.annotations);
      expect(after?.metadata?.ownerReferences).toEqual(before?.metadata?.ownerReferences);
      expect(after?.metadata?.ownerReferences).toHaveLength(1);
    } finally {
      await limited.close();
    }
  });

  it('answers 500 "Reload failed" when the gateway cannot reload', async () => {
    const failing = await startAdmin(
      clusterDeps(namespace, redis, {
        reload: async () => {
          throw new Error('config folder unreadable');
        },
      }).deps,
    );
    try {
      const res = await failing.call('GET', '/gw/reload', { headers: [auth] });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ status: 'error', message: 'Reload failed' });
    } finally {
      await failing.close();
    }
  });
});
