import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, ready, startOperator, waitFor } from './support.ts';

const keyErrors = async (operator: Operator): Promise<number> =>
  (await operator.metrics.reconciles.get()).values.find((v) => v.labels.kind === 'Key' && v.labels.result === 'error')?.value ?? 0;

/**
 * A namespace being deleted refuses every create in it (the API server's NamespaceLifecycle
 * admission). This test bed runs no namespace controller, so the namespace stays Terminating
 * with its objects, and a Key whose Secret goes meanwhile asks for a new one that cannot be made.
 */
describe('operator: a namespace being deleted', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let operator: Operator | undefined;

  afterAll(async () => {
    await operator?.stop();
  });

  it('stops a reconcile its namespace refuses as terminating, instead of retrying it', async () => {
    const ns = await createNamespace('operator-terminating');
    // No resync within the test: each failure counted is a retry.
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns, namespace: ns, resyncSeconds: 600 });
    await c.create('Key', ns, { metadata: { name: 'left' }, spec: { alias: 'left', rate: 3, per: 10 } });
    await waitFor('the Key Ready', async () => ready(await c.get('Key', ns, 'left'))?.status === 'True');

    const core = kc.makeApiClient(CoreV1Api);
    await core.deleteNamespace({ name: ns });
    await waitFor('the namespace terminating', async () => (await core.readNamespace({ name: ns })).status?.phase === 'Terminating');
    const before = await keyErrors(operator);
    await core.deleteNamespacedSecret({ name: 'gw-key-left', namespace: ns });
    await waitFor('the refused reconcile', async () => (await keyErrors(operator!)) > before);
    // Retried with backoff (200 ms doubling), it would have failed again several times by now.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(await keyErrors(operator)).toBe(before + 1);
  });
});
