import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, ready, startOperator, waitFor } from './support.ts';

describe('operator: a session Redis lost', () => {
  const kc = kubeConfig();
  const c = client(kc);
  const redis = new Redis(testEnv().redisUrl);
  let operator: Operator | undefined;

  afterAll(async () => {
    await operator?.stop();
    redis.disconnect();
  });

  it('is stored again at the next resync, with a Warning Event on the Key and a count', async () => {
    const ns = await createNamespace('operator-restored');
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns, namespace: ns });
    await c.create('Key', ns, { metadata: { name: 'lost' }, spec: { alias: 'lost', rate: 3, per: 10 } });
    const key = await waitFor('the Key Ready', async () => {
      const found = await c.get('Key', ns, 'lost');
      return ready(found)?.status === 'True' ? found : undefined;
    });
    const session = sessionKey(key.status?.key_hash as string);
    // As a Redis restarted without persistence, or a FLUSHALL, leaves it.
    await redis.del(session);
    await waitFor('the session back', async () => (await redis.exists(session)) === 1);
    const events = await waitFor('the Event', async () => {
      const list = await c.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=lost,reason=SessionRestored' });
      return list.items.length > 0 ? list.items : undefined;
    });
    expect(events[0]).toMatchObject({ type: 'Warning', message: 'session was missing from Redis (restarted empty, flushed or evicted) and is stored again (raw key in Secret gw-key-lost)' });
    expect((await operator.metrics.sessionsRestored.get()).values[0]?.value).toBe(1);
  });
});
