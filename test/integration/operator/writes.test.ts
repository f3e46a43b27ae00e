import { afterEach, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { apiRequests, isWrite, requestsBetween } from '../../harness/api-requests.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { waitFor as pollUntil } from '../../support/wait-for.ts';
import { client, ready, startOperator, waitFor } from './support.ts';

const KEYS = 4;

const metricsText = async (operator: Operator): Promise<string> => (await fetch(`http://127.0.0.1:${operator.healthPort()}/metrics`)).text();

async function reconciles(operator: Operator): Promise<Record<string, number>> {
  const text = await metricsText(operator);
  return Object.fromEntries([...text.matchAll(/^gw_operator_reconciles_total\{kind="(\w+)",result="success"\} (\d+)/gm)].map((m) => [m[1]!, Number(m[2])]));
}

/**
 * Until no queue holds work and no reconcile ran for half a second: an object shows Ready
 * after its first reconcile, while a change seen during it (the Policy created next to the
 * API) may still have a second one queued.
 */
async function settled(operator: Operator): Promise<void> {
  let last = '';
  const idle = async (): Promise<boolean> => {
    const busy = [...(await metricsText(operator)).matchAll(/^gw_operator_queue_depth\{kind="\w+"\} (\d+)/gm)].some((m) => m[1] !== '0');
    const counts = JSON.stringify(await reconciles(operator));
    const still = !busy && counts === last;
    last = counts;
    return still;
  };
  await pollUntil('operator idle', idle, 30_000, 500);
}

/**
 * What the operator costs the API server: with 10,000 Keys, every request per Key is
 * 10,000 requests, so these counts are the operator's scale (docs/architecture.md#operator-at-scale).
 */
describe('operator: the API requests a reconcile makes', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let operator: Operator | undefined;
  afterEach(async () => {
    await operator?.stop();
    operator = undefined;
  });

  it('a new Key costs three writes and one reconcile; a restart with resyncs writes nothing', async () => {
    const ns = await createNamespace('op-writes');
    const { kubeconfig, redisUrl } = testEnv();
    operator = await startOperator(kc, { redisUrl, watchNamespaces: ns, resyncSeconds: 3600 });
    await c.create('ApiDefinition', ns, {
      metadata: { name: 'orders' },
      spec: { api_id: 'orders', use_keyless: false, proxy: { listen_path: '/orders/', target_url: 'http://127.0.0.1:9000' } },
    });
    await c.create('Policy', ns, { metadata: { name: 'plan' }, spec: { rate: 10, per: 60, access_rights: { orders: {} } } });
    await waitFor('policy and API Ready', async () => ready(await c.get('Policy', ns, 'plan'))?.status === 'True' && ready(await c.get('ApiDefinition', ns, 'orders'))?.status === 'True');
    await settled(operator);
    const apiReconciles = (await reconciles(operator)).ApiDefinition;

    const before = await apiRequests(kubeconfig);
    const reconcilesBefore = (await reconciles(operator)).Key ?? 0;
    await Promise.all(Array.from({ length: KEYS }, (_, i) => c.create('Key', ns, { metadata: { name: `k${i}` }, spec: { apply_policies: ['plan'] } })));
    await waitFor('every Key Ready', async () => (await c.list('Key', ns)).filter((k) => ready(k)?.status === 'True').length === KEYS);
    // Anything the writes' own watch events would set off has had time to run.
    await new Promise((r) => setTimeout(r, 1_000));
    const served = requestsBetween(before, await apiRequests(kubeconfig)).counts;
    // Per Key: its finalizer, its Secret, its status. Nothing is written twice.
    expect(served.get('POST keys')).toBe(KEYS);
    expect(served.get('PATCH keys')).toBe(KEYS);
    expect(served.get('POST secrets')).toBe(KEYS);
    expect(served.get('PATCH keys/status')).toBe(KEYS);
    expect((await reconciles(operator)).Key! - reconcilesBefore).toBe(KEYS);
    // The ConfigMap the API reconcile wrote did not bring the API back either.
    expect((await reconciles(operator)).ApiDefinition).toBe(apiReconciles);
    await operator.stop();

    // A new operator (a restart, a new leader) reconciles everything on start and resyncs
    // every second: everything is up to date, so it writes nothing.
    const restartBefore = await apiRequests(kubeconfig);
    operator = await startOperator(kc, { redisUrl, watchNamespaces: ns, resyncSeconds: 1 });
    await waitFor('restart reconciled every Key twice', async () => ((await reconciles(operator!)).Key ?? 0) >= 2 * KEYS, 10_000);
    const afterRestart = requestsBetween(restartBefore, await apiRequests(kubeconfig));
    expect(afterRestart.lines.filter(isWrite)).toEqual([]);
  });
});
