import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, kubectl, testEnv } from '../../harness/index.ts';
import { client, ready, removeGwResources, startOperator, waitFor } from './support.ts';

const SWEEP_SECONDS = 1;

/**
 * README.md#the-operator-gw-operator: a Key deleted while no operator ran its finalizer (the
 * operator down, the finalizer patched away by hand) leaves a session that still lets its raw
 * key in; the operator's pass over Redis finds and removes it, and nothing else.
 */
describe('operator: sessions of Keys deleted without their finalizer', () => {
  const kc = kubeConfig();
  const c = client(kc);
  const redis = new Redis(testEnv().redisUrl);
  const operators: Operator[] = [];
  const planted: string[] = [];
  let ns = '';

  afterAll(async () => {
    if (planted.length > 0) await redis.del(...planted);
    if (ns !== '') await removeGwResources(kc, ns);
    for (const operator of operators) await operator.stop();
    redis.disconnect();
  });

  const readyKey = (name: string) =>
    waitFor(`Key ${name} Ready`, async () => {
      const found = await c.get('Key', ns, name);
      return ready(found)?.status === 'True' ? found : undefined;
    });

  it('removes the session of a Key deleted while the operator was down, and keeps every other', async () => {
    ns = await createNamespace('operator-orphans');
    const options = { redisUrl: testEnv().redisUrl, watchNamespaces: ns, namespace: ns, orphanSessionSweepSeconds: SWEEP_SECONDS };
    const first = await startOperator(kc, options);
    operators.push(first);
    await c.create('Key', ns, { metadata: { name: 'kept' }, spec: { alias: 'kept', rate: 3, per: 10 } });
    await c.create('Key', ns, { metadata: { name: 'orphaned' }, spec: { alias: 'orphaned', rate: 3, per: 10 } });
    const kept = sessionKey((await readyKey('kept')).status?.key_hash as string);
    const orphaned = sessionKey((await readyKey('orphaned')).status?.key_hash as string);

    // Sessions that are no Key's of this operator's: create-key's before its Key exists (no
    // uid), and one of a namespace it does not watch.
    const template = JSON.parse((await redis.get(kept))!) as Record<string, unknown>;
    const noUid = sessionKey(randomBytes(32).toString('hex'));
    const elsewhere = sessionKey(randomBytes(32).toString('hex'));
    planted.push(noUid, elsewhere);
    await redis.set(noUid, JSON.stringify({ ...template, key_id: 'made-by-create-key', key_uid: '' }));
    await redis.set(elsewhere, JSON.stringify({ ...template, namespace: `${ns}-not-watched`, key_uid: 'a-uid-of-another-namespace' }));

    // The operator down, the Key deleted: it waits on its finalizer, which the user patches away.
    await first.stop();
    await kubectl(['delete', 'key', 'orphaned', '-n', ns, '--wait=false']);
    await kubectl(['patch', 'key', 'orphaned', '-n', ns, '--type=merge', '-p', '{"metadata":{"finalizers":null}}']);
    await waitFor('the Key gone', async () => (await c.get('Key', ns, 'orphaned')) === undefined);
    expect(await redis.exists(orphaned)).toBe(1);

    const started = performance.now();
    const second = await startOperator(kc, options);
    operators.push(second);
    await waitFor('the orphaned session removed', async () => (await redis.exists(orphaned)) === 0, 15_000);
    // Found in two passes in a row, a pass apart.
    expect(performance.now() - started).toBeGreaterThanOrEqual(SWEEP_SECONDS * 1000 - 50);
    expect((await second.metrics.orphanSessionsRemoved.get()).values[0]?.value).toBe(1);
    // Passes later, everything else is as it was.
    await new Promise((resolve) => setTimeout(resolve, 3 * SWEEP_SECONDS * 1000));
    expect(await redis.exists(kept, noUid, elsewhere)).toBe(3);
    expect((await second.metrics.orphanSessionsRemoved.get()).values[0]?.value).toBe(1);
  }, 60_000);
});
