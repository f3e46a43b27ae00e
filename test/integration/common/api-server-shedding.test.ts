/**
 * The shared connections of operator and sidecar (common/kube-connections.ts) send a request
 * the API server shed with 429 again, a create with its body, after its Retry-After. The API server is made to shed
 * with API Priority and Fairness: a FlowSchema puts one ServiceAccount's requests on a
 * priority level of the fewest seats the server gives (three here), lending and borrowing none,
 * that rejects rather than queues what does not fit.
 */
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { shareConnections } from '../../../common/kube-connections.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { serviceAccountToken } from '../../support/service-account.ts';

const ACCOUNT = 'shed';
const CONCURRENT = 10;

describe('Kubernetes API calls while the API server sheds load', () => {
  let namespace: string;
  let token: string;
  let flowName: string;

  const client = (shared: boolean): CoreV1Api => {
    const kc = new KubeConfig();
    const cluster = kubeConfig().getCurrentCluster();
    if (!cluster) throw new Error('the harness kubeconfig has no cluster');
    kc.loadFromOptions({ clusters: [cluster], users: [{ name: ACCOUNT, token }], contexts: [{ name: ACCOUNT, cluster: cluster.name, user: ACCOUNT }], currentContext: ACCOUNT });
    return (shared ? shareConnections(kc) : kc).makeApiClient(CoreV1Api);
  };

  /** CONCURRENT lists at once: the answers' statuses (200, or the error's code). */
  const burst = async (api: CoreV1Api): Promise<number[]> =>
    (await Promise.allSettled(Array.from({ length: CONCURRENT }, () => api.listNamespacedConfigMap({ namespace }))))
      .map((r) => (r.status === 'fulfilled' ? 200 : ((r.reason as { code?: number }).code ?? 0)));

  beforeAll(async () => {
    namespace = await createNamespace('shed');
    flowName = `gw-test-${namespace}`;
    token = await serviceAccountToken(namespace, ACCOUNT, [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'create'] }]);
    // Lists of 40 ConfigMaps of 16 KB take long enough for a burst to overlap on the server.
    const filler = 'x'.repeat(16 * 1024);
    const configMaps = Array.from({ length: 40 }, (_, i) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `filler-${i}`, namespace }, data: { filler } }));
    const flowControl = [
      {
        apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
        kind: 'PriorityLevelConfiguration',
        metadata: { name: flowName },
        // Borrowing off: without a limit the level borrows idle seats of other levels once its
        // demand has been high for a while (the server revises the shares every 10 s), and then
        // stops shedding: seen in a CI run as 20 bursts in a row answered 200.
        spec: { type: 'Limited', limited: { nominalConcurrencyShares: 1, lendablePercent: 0, borrowingLimitPercent: 0, limitResponse: { type: 'Reject' } } },
      },
      {
        apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
        kind: 'FlowSchema',
        metadata: { name: flowName },
        spec: {
          priorityLevelConfiguration: { name: flowName },
          matchingPrecedence: 500,
          distinguisherMethod: { type: 'ByUser' },
          rules: [{ subjects: [{ kind: 'ServiceAccount', serviceAccount: { name: ACCOUNT, namespace } }], resourceRules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'] }] }],
        },
      },
    ];
    await kubectl(['apply', '-f', '-'], { input: [...configMaps, ...flowControl].map((doc) => stringify(doc)).join('---\n') });
  }, 60_000);

  afterAll(async () => {
    await kubectl(['delete', 'flowschema,prioritylevelconfiguration', flowName, '--ignore-not-found']);
  });

  /** Requests of this FlowSchema the API server rejected so far, from its own metrics. */
  const rejected = async (): Promise<number> => {
    const metrics = (await kubectl(['get', '--raw', '/metrics'])).stdout;
    return metrics.split('\n')
      .filter((line) => line.startsWith('apiserver_flowcontrol_rejected_requests_total{') && line.includes(`flow_schema="${flowName}"`))
      .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
  };

  it('a plain client gets 429s in a burst; through the shared connections every request is answered, the shed ones sent again', async () => {
    // The server applies a new FlowSchema within a moment: burst until it sheds (bounded).
    let plain: number[] = [];
    for (let attempt = 0; attempt < 20 && !plain.includes(429); attempt += 1) {
      if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 500));
      plain = await burst(client(false));
    }
    expect(plain, 'the API server shed some of the plain burst').toContain(429);
    expect(plain.every((code) => code === 200 || code === 429)).toBe(true);

    // Bursts through the shared connections until the server sheds during one (bounded): all
    // of every burst answered 200, however many of its requests the server turned away.
    const api = client(true);
    let shedDuringShared = 0;
    for (let attempt = 0; attempt < 10 && shedDuringShared === 0; attempt += 1) {
      const before = await rejected();
      expect(await burst(api)).toEqual(Array.from({ length: CONCURRENT }, () => 200));
      shedDuringShared = (await rejected()) - before;
    }
    expect(shedDuringShared, 'requests the API server rejected during a shared burst').toBeGreaterThan(0);
  }, 90_000);

  it('through the shared connections every create of a burst is made, the shed ones sent again with their body', async () => {
    const api = client(true);
    const admin = kubeConfig().makeApiClient(CoreV1Api);
    // Bodies of 256 KB keep the creates on the server long enough for a burst to overlap.
    const data = (name: string): Record<string, string> => ({ name, filler: 'y'.repeat(256 * 1024) });
    let shedDuringShared = 0;
    for (let attempt = 0; attempt < 10 && shedDuringShared === 0; attempt += 1) {
      const names = Array.from({ length: CONCURRENT }, (_, i) => `created-${attempt}-${i}`);
      const before = await rejected();
      const created = await Promise.allSettled(names.map((name) => api.createNamespacedConfigMap({ namespace, body: { metadata: { name }, data: data(name) } })));
      expect(created.map((r) => (r.status === 'fulfilled' ? 201 : ((r.reason as { code?: number }).code ?? 0)))).toEqual(names.map(() => 201));
      shedDuringShared = (await rejected()) - before;
      for (const name of names) {
        const stored = await admin.readNamespacedConfigMap({ name, namespace });
        expect(stored.data).toEqual(data(name));
      }
    }
    expect(shedDuringShared, 'creates the API server rejected during a shared burst').toBeGreaterThan(0);
  }, 120_000);
});
