import { CoreV1Api, KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricsText } from '../../../common/metrics-text.ts';
import { defaultGatewaySettings } from '../../../crds/settings.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { KubeConfigSource } from '../../../sidecar/config/kube-source.ts';
import { createSidecarMetrics, type SidecarMetrics } from '../../../sidecar/metrics.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { latencyProxy, type LatencyProxy } from '../../support/latency-proxy.ts';
import { serviceAccountToken, serviceAccountWithRole, type RoleRule } from '../../support/service-account.ts';
import { call, compiledApi, compiledConfig, eventually, quietLogger, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';

describe('a sidecar whose ConfigMap watch keeps failing', () => {
  const graceMs = 1_500;
  const account = 'gw-sidecar';
  const rules: RoleRule[] = [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }];
  let namespace: string;
  let upstream: EchoUpstream;
  // A loopback link to the API server whose open connections the test cuts: a watch then ends, and the next one authenticates afresh.
  let link: LatencyProxy;
  let metrics: SidecarMetrics;
  let sidecar: RunningSidecar;
  let token: string;
  let podCore: CoreV1Api;

  beforeAll(async () => {
    namespace = await createNamespace('sc-watch-failing');
    upstream = await startEchoUpstream();
    token = await serviceAccountToken(namespace, account, rules);
    const admin = kubeConfig();
    const cluster = admin.getCurrentCluster()!;
    link = await latencyProxy(cluster.server);
    // As in a pod: the projected token of its ServiceAccount, whose Role may read ConfigMaps.
    const podConfig = new KubeConfig();
    podConfig.loadFromOptions({
      clusters: [{ ...cluster, server: new URL(link.url).origin }],
      users: [{ name: account, token }],
      contexts: [{ name: account, cluster: cluster.name, user: account }],
      currentContext: account,
    });
    podCore = podConfig.makeApiClient(CoreV1Api);
    metrics = createSidecarMetrics();
    const source = new KubeConfigSource({ kubeConfig: podConfig, namespace, apis: '*', defaultSettings: defaultGatewaySettings, logger: quietLogger, metrics, watchFailingGraceMs: graceMs });
    sidecar = await startTestSidecar(sidecarOptions(namespace), { source });
  });

  afterAll(async () => {
    await sidecar?.close();
    await link?.close();
    await upstream?.close();
  });

  const readyz = async (): Promise<{ status: number; problems: { subject: string; reason: string }[] }> => {
    const res = await call(`${sidecar.healthUrl}/readyz`);
    return { status: res.status, problems: (res.json() as { problems: { subject: string; reason: string }[] }).problems };
  };
  const watchProblem = async (): Promise<string | undefined> => (await readyz()).problems.find((p) => p.subject.startsWith('ConfigMap watch'))?.reason;
  const watchFailingMetric = async (): Promise<string | undefined> =>
    (await metricsText(metrics.registry)).split('\n').find((line) => line.startsWith('gw_config_problems{') && line.includes('reason="WatchFailing"'));
  /** Waits until the API server answers the pod's list with `code` (its caches take a moment), then ends the watch, whose next start is answered the same. */
  const refuseWatch = async (code: number): Promise<void> => {
    const answer = (): Promise<number> => podCore.listNamespacedConfigMap({ namespace }).then(() => 200, (err: { code?: number }) => err.code ?? 0);
    await eventually(async () => (await answer()) === code, 10_000, `the pod's list answered ${code}`);
    link.cut();
  };
  const pathSeen = async (apiId: string): Promise<string> => {
    const res = await call(`${sidecar.proxyUrl}/${apiId}/x`);
    return res.status === 200 ? (res.json() as { path: string }).path : `status ${res.status}`;
  };

  it('lists the failure on /readyz and in gw_config_problems after the grace, serves its last config meanwhile, and clears once access is back', async () => {
    const api = compiledApi(uniqueId('api'), `${upstream.url}/v1`);
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api])));
    await eventually(async () => (await pathSeen(api.api_id)) === '/v1/x', 10_000, 'api served');
    expect(await watchProblem()).toBeUndefined();

    // The Role's binding goes: the next watch is refused (403), and may be given back.
    await kubeConfig().makeApiClient(RbacAuthorizationV1Api).deleteNamespacedRoleBinding({ name: account, namespace });
    await refuseWatch(403);
    const cutAt = Date.now();
    await eventually(async () => (await watchProblem()) !== undefined, 15_000, 'the watch failure on /readyz');
    expect(Date.now() - cutAt).toBeGreaterThanOrEqual(graceMs);
    const forbidden = await readyz();
    // A problem, not a reason: the pod stays in its Service, serving the config it has.
    expect(forbidden.status).toBe(200);
    expect(await watchProblem()).toMatch(/^failing for \d+ s: 403 Forbidden; serving the config as of \d{4}-\d\d-\d\dT/);
    expect(await watchFailingMetric()).toBe('gw_config_problems{kind="ConfigMap",reason="WatchFailing"} 1');
    expect(await pathSeen(api.api_id)).toBe('/v1/x');

    // A change made while the watch fails arrives once access is back, and the problem goes.
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([{ ...api, target_url: `${upstream.url}/v2` }])));
    await kubectl(['apply', '-f', '-'], { input: serviceAccountWithRole(namespace, account, rules) });
    await eventually(async () => (await watchProblem()) === undefined, 20_000, 'the problem cleared');
    expect(await watchFailingMetric()).toBeUndefined();
    await eventually(async () => (await pathSeen(api.api_id)) === '/v2/x', 10_000, 'the change made meanwhile');

    // The ServiceAccount goes (a helm uninstall): its token is refused for good (401).
    await kubeConfig().makeApiClient(CoreV1Api).deleteNamespacedServiceAccount({ name: account, namespace });
    await refuseWatch(401);
    // The watch came back less than the longest restart delay before: the backoff goes on from the 403s, up to that delay (30 s).
    await eventually(async () => (await watchProblem())?.includes(' 401 ') === true, 45_000, 'the refused token on /readyz');
    const reason = (await watchProblem())!;
    expect(reason).toMatch(/^failing for \d+ s: 401 Unauthorized \(this pod's ServiceAccount token is refused: .* restart the pod\); serving the config as of /);
    expect(reason).not.toContain(token);
    expect((await readyz()).status).toBe(200);
    expect(await watchFailingMetric()).toBe('gw_config_problems{kind="ConfigMap",reason="WatchFailing"} 1');
    expect(await pathSeen(api.api_id)).toBe('/v2/x');
  }, 120_000);
});
