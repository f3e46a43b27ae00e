import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import type { Operator } from '../../../operator/operator.ts';
import { keyHash } from '../../../crds/key-hash.ts';
import { createNamespace, kubeConfig, startRedis, testEnv, type RedisHandle } from '../../harness/index.ts';
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

describe('operator: a session through a Redis outage that outlasts a reconcile', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let ns: string;
  let redisServer: RedisHandle;
  let redis: Redis;
  let operator: Operator | undefined;

  beforeAll(async () => {
    ns = await createNamespace('operator-outlasting');
    redisServer = await startRedis();
    redis = new Redis(redisServer.url, { maxRetriesPerRequest: 1 });
    redis.on('error', () => undefined);
    operator = await startOperator(kc, { redisUrl: redisServer.url, watchNamespaces: ns, namespace: ns });
  });

  afterAll(async () => {
    await operator?.stop();
    redis?.disconnect();
    await redisServer?.dispose();
  });

  it('is restored, with the Warning Event and the count, when Redis comes back empty', async () => {
    await c.create('Key', ns, { metadata: { name: 'outlasting' }, spec: { rate: 3, per: 10 } });
    const key = await waitFor('the Key Ready', async () => {
      const found = await c.get('Key', ns, 'outlasting');
      return ready(found)?.status === 'True' ? found : undefined;
    });
    expect(key.status?.sessionStored).toBe(true);
    await redisServer.stop();
    // The operator's resync (2 s here) finds Redis gone before it is back.
    const waiting = await waitFor('SessionStoreUnavailable', async () => {
      const found = await c.get('Key', ns, 'outlasting');
      return ready(found)?.reason === 'SessionStoreUnavailable' ? found : undefined;
    });
    expect(waiting.status).toMatchObject({ key_hash: key.status?.key_hash, sessionStored: true });
    await redisServer.start();
    await waitFor('the Key Ready again', async () => ready(await c.get('Key', ns, 'outlasting'))?.status === 'True');
    expect(await redis.exists(sessionKey(key.status?.key_hash as string))).toBe(1);
    const events = await c.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=outlasting' });
    expect(events.items.map((event) => event.reason).filter((reason) => reason !== 'SessionStoreUnavailable').sort()).toEqual(['SessionCreated', 'SessionRestored']);
    expect((await operator!.metrics.sessionsRestored.get()).values[0]?.value).toBe(1);
  });

  it('keeps naming the old key while Redis refuses to remove its session, which keeps working, and retires it once Redis takes writes', async () => {
    const [first, second] = [keyHash('outlasting-first-raw-key'), keyHash('outlasting-second-raw-key')];
    await c.create('Key', ns, { metadata: { name: 'rekeyed' }, spec: { key_hash: first, rate: 3, per: 10 } });
    await waitFor('the Key Ready', async () => ready(await c.get('Key', ns, 'rekeyed'))?.status === 'True');
    // A Redis that answers but takes no writes (here: no replica to write to).
    await redis.config('SET', 'min-replicas-to-write', '1');
    try {
      await c.replaceSpec('Key', ns, 'rekeyed', { key_hash: second, rate: 3, per: 10 });
      const refused = await waitFor('SessionStoreUnavailable', async () => {
        const found = await c.get('Key', ns, 'rekeyed');
        return ready(found)?.reason === 'SessionStoreUnavailable' ? found : undefined;
      });
      expect(refused.status?.key_hash).toBe(first);
      expect(ready(refused)?.message).toMatch(/^could not remove the session of the key it had before, which works until then: Redis refused it: NOREPLICAS /);
      expect(await redis.exists(sessionKey(first), sessionKey(second))).toBe(1);
    } finally {
      await redis.config('SET', 'min-replicas-to-write', '0');
    }
    const rekeyed = await waitFor('the Key Ready under its new key', async () => {
      const found = await c.get('Key', ns, 'rekeyed');
      return ready(found)?.status === 'True' && found?.status?.key_hash === second ? found : undefined;
    });
    expect(rekeyed.status?.sessionStored).toBe(true);
    expect(await redis.exists(sessionKey(first))).toBe(0);
    expect(await redis.exists(sessionKey(second))).toBe(1);
  });
});
