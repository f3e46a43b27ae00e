import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, ready, removeGwResources, startOperator, waitFor } from './support.ts';

const RESYNC_SECONDS = 3;

/** Every ApiDefinition reconcile the operator ran, whatever its result. */
async function apiReconciles(operator: Operator): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${operator.healthPort()}/metrics`)).text();
  return [...text.matchAll(/^gw_operator_reconciles_total\{kind="ApiDefinition",result="\w+"\} (\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
}

describe('operator: the compiled ConfigMap of an ApiDefinition', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let ns: string;
  let operator: Operator;

  const api = (name: string) =>
    c.create('ApiDefinition', ns, {
      metadata: { name },
      spec: { api_id: `${ns}-${name}`, use_keyless: true, proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' } },
    });

  beforeAll(async () => {
    ns = await createNamespace('op-api-cm');
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns, resyncSeconds: RESYNC_SECONDS });
  });

  afterAll(async () => {
    await removeGwResources(kc, ns);
    await operator?.stop();
  });

  it('leaves a ConfigMap of its name made by someone else as it is, says so, looks again at the resync pace, and writes its own once that one is gone', async () => {
    const foreign = { metadata: { name: 'gw-api-foreign' }, data: { 'config.json': '{"hand":1}' } };
    await c.core.createNamespacedConfigMap({ namespace: ns, body: foreign });
    await api('foreign');
    const refused = await waitFor('ApiDefinition foreign Ready=False', async () => {
      const cond = ready(await c.get('ApiDefinition', ns, 'foreign'));
      return cond?.status === 'False' ? cond : undefined;
    });
    expect(refused).toMatchObject({ reason: 'ConfigMapNameTaken', message: expect.stringContaining('ConfigMap gw-api-foreign exists and is not this ApiDefinition') });
    const warnings = await waitFor('the Warning event', async () => {
      const events = await c.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=foreign,reason=ConfigMapNameTaken' });
      return events.items.length > 0 ? events.items : undefined;
    });
    expect(warnings[0]?.type).toBe('Warning');

    // Not a cache behind the store, so no retry every second: the resync's pace.
    const before = await apiReconciles(operator);
    await new Promise((resolve) => setTimeout(resolve, 2 * RESYNC_SECONDS * 1000));
    expect(await apiReconciles(operator) - before).toBeLessThanOrEqual(3);
    const untouched = await c.configMap(ns, 'gw-api-foreign');
    expect(untouched?.data).toEqual(foreign.data);
    expect(untouched?.metadata?.labels).toBeUndefined();
    expect(untouched?.metadata?.ownerReferences).toBeUndefined();

    await c.core.deleteNamespacedConfigMap({ namespace: ns, name: 'gw-api-foreign' });
    const own = await waitFor('the operator writes its own', async () => {
      const cm = await c.configMap(ns, 'gw-api-foreign');
      return cm?.metadata?.labels?.['app.kubernetes.io/managed-by'] === 'gw-operator' ? cm : undefined;
    }, 4 * RESYNC_SECONDS * 1000);
    expect(own.metadata?.ownerReferences?.[0]?.uid).toBe((await c.get('ApiDefinition', ns, 'foreign'))?.metadata.uid);
    expect(JSON.parse(own.data!['config.json']!).apis[0].api_id).toBe(`${ns}-foreign`);
    await waitFor('ApiDefinition foreign Ready=True', async () => ready(await c.get('ApiDefinition', ns, 'foreign'))?.status === 'True');
  });
});
