import { CoreV1Api, KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import { KubeEventSink } from '../../../sidecar/events/kube-event-sink.ts';
import { createSidecarMetrics } from '../../../sidecar/metrics.ts';
import type { SmoothingEvent } from '../../../sidecar/limits/types.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { startEchoUpstream } from '../../../demo/upstream.ts';
import { call, compiledApi, deployApi, eventually, quietLogger, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

interface CoreEvent {
  reason: string;
  type: string;
  message?: string;
  action?: string;
  reportingComponent?: string;
  reportingInstance?: string;
  involvedObject: { kind: string; name: string; namespace: string; apiVersion: string; uid?: string };
  series?: { count: number };
}

async function eventsIn(namespace: string): Promise<CoreEvent[]> {
  const res = await kubectl(['get', 'events', '-n', namespace, '-o', 'json']);
  expect(res.code).toBe(0);
  return (JSON.parse(res.stdout) as { items: CoreEvent[] }).items;
}

/** The namespace's Events once one of them has a series of `count`. */
async function onceCounted(namespace: string, count: number): Promise<CoreEvent[]> {
  await eventually(async () => (await eventsIn(namespace)).some((e) => e.series?.count === count), 10_000, `a series of ${count}`);
  return eventsIn(namespace);
}

/** Each Event as its reason, its transition and its count, sorted. */
const summary = (events: CoreEvent[]): string[] => events.map((e) => `${e.reason} ${e.message?.split(' (')[0]} x${e.series?.count ?? 1}`).sort();

function smoothing(namespace: string, name: string, reason: SmoothingEvent['reason'], oldAllowance: number, newAllowance: number): SmoothingEvent {
  return {
    reason,
    source: { kind: 'Policy', namespace, name, uid: '0f6c1d2e-1111-4222-8333-944455556666' },
    limiterKey: 'policy:team/gold#raw-identity',
    oldAllowance,
    newAllowance,
    time: new Date(),
  };
}

/** A gateway's rights on Events only, as charts/gw/templates/sidecar-rbac.yaml grants them. */
async function sidecarKubeConfig(namespace: string): Promise<KubeConfig> {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const name = 'gateway';
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await rbac.createNamespacedRole({ namespace, body: { metadata: { name }, rules: [{ apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] }] } });
  await rbac.createNamespacedRoleBinding({ namespace, body: { metadata: { name }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name }, subjects: [{ kind: 'ServiceAccount', name, namespace }] } });
  const { status } = await core.createNamespacedServiceAccountToken({ namespace, name, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const config = JSON.parse(kc.exportConfig()) as { users: unknown[]; contexts: { context: { user: string } }[] };
  config.users = [{ name, user: { token: status?.token } }];
  for (const context of config.contexts) context.context.user = name;
  const restricted = new KubeConfig();
  restricted.loadFromString(JSON.stringify(config));
  return restricted;
}

describe('smoothing Events (events.k8s.io/v1)', () => {
  let sink: KubeEventSink | undefined;

  afterEach(async () => {
    await sink?.close();
  });

  it('writes one Event per transition, aggregating its repeats into its series', async () => {
    const namespace = await createNamespace('sc-events');
    sink = new KubeEventSink({ kubeConfig: kubeConfig(), instanceId: 'pod-a', logger: quietLogger, metrics: createSidecarMetrics() });
    sink.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 10, 15));
    await eventually(async () => (await eventsIn(namespace)).length === 1, 10_000, 'first event');
    sink.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 15, 20));
    sink.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingDown', 20, 15));
    sink.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 15, 20));
    sink.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 15, 20));
    const events = await onceCounted(namespace, 3);
    // Every step shows, each with its own allowances: 10 -> 15 once, 15 -> 20 three times, 20 -> 15 once.
    expect(summary(events)).toEqual([
      'RateLimitSmoothingDown allowance 20 -> 15 x1',
      'RateLimitSmoothingUp allowance 10 -> 15 x1',
      'RateLimitSmoothingUp allowance 15 -> 20 x3',
    ]);
    const up = events.find((e) => e.reason === 'RateLimitSmoothingUp' && e.series?.count === 3);
    expect(up).toMatchObject({
      type: 'Normal',
      action: 'Smoothing',
      reportingComponent: 'gw.dev/sidecar',
      reportingInstance: 'pod-a',
      involvedObject: { apiVersion: 'gw.dev/v1alpha1', kind: 'Policy', name: 'gold', namespace },
      series: { count: 3 },
    });
    expect(up?.message).toMatch(/^allowance 15 -> 20 \(limiter [0-9a-f]{16}\)$/);
    expect(events.map((e) => e.message).join(' ')).not.toContain('raw-identity');
  });

  it('folds the repeats two gateways meet into one Event, each adding its own to the series', async () => {
    const namespace = await createNamespace('sc-events-gateways');
    const kc = await sidecarKubeConfig(namespace);
    const a = new KubeEventSink({ kubeConfig: kc, instanceId: 'pod-a', logger: quietLogger, metrics: createSidecarMetrics() });
    const b = new KubeEventSink({ kubeConfig: kc, instanceId: 'pod-b', logger: quietLogger, metrics: createSidecarMetrics() });
    try {
      a.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
      await eventually(async () => (await eventsIn(namespace)).length === 1, 10_000, 'first event');
      b.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
      await eventually(async () => (await eventsIn(namespace)).some((e) => e.series?.count === 2), 10_000, 'second gateway joins');
      // Both at once, twice over: creates and series updates race on the API server.
      for (let round = 0; round < 2; round += 1) {
        for (let i = 0; i < 3; i += 1) {
          a.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
          b.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      b.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingDown', 4, 2));
      const events = await onceCounted(namespace, 14);
      expect(summary(events)).toEqual([
        'RateLimitSmoothingDown allowance 4 -> 2 x1',
        'RateLimitSmoothingUp allowance 2 -> 4 x14',
      ]);
      // The first gateway to write it reports it; the name holds neither key nor limiter.
      expect(events.find((e) => e.reason === 'RateLimitSmoothingUp')).toMatchObject({ reportingInstance: 'pod-a' });
      expect(JSON.stringify(events)).not.toContain('raw-identity');
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('starts a new Event for a transition whose Event has seen no repeat within the window, on any gateway', async () => {
    const namespace = await createNamespace('sc-events-window');
    const a = new KubeEventSink({ kubeConfig: kubeConfig(), instanceId: 'pod-a', logger: quietLogger, metrics: createSidecarMetrics(), windowMs: 1_000 });
    const b = new KubeEventSink({ kubeConfig: kubeConfig(), instanceId: 'pod-b', logger: quietLogger, metrics: createSidecarMetrics(), windowMs: 1_000 });
    try {
      a.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
      await eventually(async () => (await eventsIn(namespace)).length === 1, 10_000, 'first event');
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      b.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
      await eventually(async () => (await eventsIn(namespace)).length === 2, 10_000, 'a second event');
      a.emit(smoothing(namespace, 'gold', 'RateLimitSmoothingUp', 2, 4));
      await eventually(async () => (await eventsIn(namespace)).some((e) => e.series?.count === 2), 10_000, 'the first gateway joins the new one');
      const events = await eventsIn(namespace);
      expect(events.map((e) => `${e.reportingInstance} x${e.series?.count ?? 1}`).sort()).toEqual(['pod-a x1', 'pod-b x2']);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('bounds API writes with a token bucket during a burst', async () => {
    const namespace = await createNamespace('sc-events-burst');
    const metrics = createSidecarMetrics();
    sink = new KubeEventSink({ kubeConfig: kubeConfig(), instanceId: 'pod-b', logger: quietLogger, metrics, burst: 3, perSecond: 0.01 });
    for (let i = 0; i < 20; i += 1) sink.emit(smoothing(namespace, `policy-${i}`, 'RateLimitSmoothingUp', 1, 2));
    await eventually(async () => (await eventsIn(namespace)).length === 3, 10_000, 'burst events');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await eventsIn(namespace)).toHaveLength(3);
  });

  it('forgets a series already written before one with observations still to write', async () => {
    const namespace = await createNamespace('sc-events-forget');
    // Two series remembered at most; after the burst, one write every 2 s.
    sink = new KubeEventSink({ kubeConfig: kubeConfig(), instanceId: 'pod-d', logger: quietLogger, metrics: createSidecarMetrics(), burst: 2, perSecond: 0.5, maxSeries: 2 });
    sink.emit(smoothing(namespace, 'first', 'RateLimitSmoothingUp', 1, 2));
    sink.emit(smoothing(namespace, 'second', 'RateLimitSmoothingUp', 1, 2));
    await eventually(async () => (await eventsIn(namespace)).length === 2, 10_000, 'both written');
    // A repeat of the first waits for a token; a third series must make room for itself.
    sink.emit(smoothing(namespace, 'first', 'RateLimitSmoothingUp', 1, 2));
    sink.emit(smoothing(namespace, 'third', 'RateLimitSmoothingUp', 1, 2));
    await eventually(async () => (await eventsIn(namespace)).length === 3, 15_000, 'third written');
    const events = await eventsIn(namespace);
    // The second (written, nothing pending) was forgotten; the first's repeat was kept and written.
    expect(events.find((e) => e.involvedObject.name === 'first')?.series?.count).toBe(2);
    expect(events.find((e) => e.involvedObject.name === 'third')?.series).toBeUndefined();
  });

  it('logs and counts API errors instead of throwing', async () => {
    const metrics = createSidecarMetrics();
    sink = new KubeEventSink({ kubeConfig: kubeConfig(), instanceId: 'pod-c', logger: quietLogger, metrics });
    expect(() => sink?.emit(smoothing('no-such-namespace-x1', 'gold', 'RateLimitSmoothingUp', 1, 2))).not.toThrow();
    await eventually(
      async () => (await metrics.events.get()).values.some((v) => v.labels.result === 'failed' && v.value === 1),
      10_000,
      'failure counted',
    );
  });

  it('reaches the API server from a sidecar whose API-level smoothing fires', async () => {
    const namespace = await createNamespace('sc-events-e2e');
    const upstream = await startEchoUpstream();
    const sidecar = await startTestSidecar(sidecarOptions(namespace));
    try {
      const apiId = uniqueId('smooth');
      const api = compiledApi(apiId, upstream.url, {
        source: { kind: 'ApiDefinition', namespace, name: apiId },
        api_limit: { rate: 20, per: 60 },
        smoothing: { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 0 },
      });
      await deployApi(sidecar, namespace, api, { enable_redis_rolling_limiter: true });
      for (let i = 0; i < 8; i += 1) await call(`${sidecar.proxyUrl}/${apiId}/`);
      // The first move, whichever others followed it (Event names do not sort by time).
      const first = (e: CoreEvent): boolean => e.reason === 'RateLimitSmoothingUp' && /^allowance 2 -> 4 /.test(e.message ?? '');
      await eventually(async () => (await eventsIn(namespace)).some(first), 10_000, 'smoothing event');
      const up = (await eventsIn(namespace)).find(first);
      expect(up).toMatchObject({ type: 'Normal', involvedObject: { kind: 'ApiDefinition', name: apiId, namespace }, reportingComponent: 'gw.dev/sidecar' });
    } finally {
      await sidecar.close();
      await upstream.close();
    }
  });
});
