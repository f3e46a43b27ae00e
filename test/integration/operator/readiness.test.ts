import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { kubeConfig, testEnv } from '../../harness/index.ts';
import { latencyProxy, type LatencyProxy } from '../../support/latency-proxy.ts';
import { startOperator, waitFor } from './support.ts';

/** The harness's kubeconfig, its API server reached through `proxy`. */
function throughProxy(proxy: LatencyProxy): KubeConfig {
  const base = kubeConfig();
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: base.clusters.map((cluster) => ({ ...cluster, server: proxy.url.replace(/\/$/, '') })),
    users: base.users,
    contexts: base.contexts,
    currentContext: base.currentContext,
  });
  return kc;
}

describe('operator readiness', () => {
  let operator: Operator | undefined;
  let proxy: LatencyProxy | undefined;

  afterEach(async () => {
    await operator?.stop();
    await proxy?.close();
  });

  it('is not ready while its caches have not listed (the API server refusing), and turns ready once they have', async () => {
    proxy = await latencyProxy(kubeConfig().getCurrentCluster()!.server);
    proxy.refusing = true;
    operator = await startOperator(throughProxy(proxy), { redisUrl: testEnv().redisUrl, watchNamespaces: 'readiness-none' });
    const readyz = async (): Promise<{ status: number; body: string }> => {
      const res = await fetch(`http://127.0.0.1:${operator!.healthPort()}/readyz`);
      return { status: res.status, body: await res.text() };
    };
    // Started (its first lists were tried and failed), alive, but not ready.
    expect((await fetch(`http://127.0.0.1:${operator.healthPort()}/healthz`)).status).toBe(200);
    const before = await readyz();
    expect(before.status).toBe(503);
    expect(before.body).toContain('caches not synced');
    proxy.refusing = false;
    // The informers retry with backoff (at most 10 s apart).
    await waitFor('ready', async () => (await readyz()).status === 200, 30_000);
  }, 60_000);
});
