import { Redis } from 'ioredis';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, startRedis, type RedisHandle } from '../../harness/index.ts';
import { client, ready, startOperator, waitFor } from './support.ts';

describe('operator: Redis outage', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let ns: string;
  let redisServer: RedisHandle;
  let redis: Redis;
  let operator: Operator;
  let slowProxy: Server | undefined;

  beforeAll(async () => {
    ns = await createNamespace('operator-redis');
    redisServer = await startRedis();
    redis = new Redis(redisServer.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    redis.on('error', () => undefined);
    operator = await startOperator(kc, { redisUrl: redisServer.url, watchNamespaces: ns });
  });

  afterAll(async () => {
    await operator?.stop();
    slowProxy?.close();
    redis?.disconnect();
    await redisServer?.dispose();
  });

  it('reports a key it cannot store, keeps running, and stores it when Redis returns', async () => {
    await redisServer.stop();
    await c.create('Key', ns, { metadata: { name: 'waiting' }, spec: { rate: 1, per: 1 } });
    const failing = await waitFor('SessionStoreUnavailable', async () => {
      const key = await c.get('Key', ns, 'waiting');
      return ready(key)?.reason === 'SessionStoreUnavailable' ? key : undefined;
    });
    expect(ready(failing)?.status).toBe('False');
    // What the Key's owner can act on, not the Redis client's wording (that stays in the operator's log).
    expect(ready(failing)?.message).toBe('could not write the session: Redis is not connected');
    expect(failing.metadata.finalizers).toContain('gw.dev/key-session');
    expect(failing.status?.key_hash).toMatch(/^[0-9a-f]{64}$/);
    const res = await fetch(`http://127.0.0.1:${operator.healthPort()}/healthz`);
    expect(res.status).toBe(200);

    await redisServer.start();
    const key = await waitFor('Ready after Redis returns', async () => {
      const k = await c.get('Key', ns, 'waiting');
      return ready(k)?.status === 'True' ? k : undefined;
    });
    await redis.connect();
    expect(await redis.exists(sessionKey(key.status?.key_hash as string))).toBe(1);
  });

  it('holds a deleted key by its finalizer until Redis is back, then removes the session', async () => {
    const key = (await c.get('Key', ns, 'waiting'))!;
    const hash = key.status?.key_hash as string;
    await redisServer.stop();
    await c.remove('Key', ns, 'waiting');
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const held = await c.get('Key', ns, 'waiting');
    expect(held?.metadata.finalizers).toContain('gw.dev/key-session');
    await redisServer.start();
    await waitFor('key deleted', async () => (await c.get('Key', ns, 'waiting')) === undefined, 40_000);
    await waitFor('redis reconnected', async () => (await redis.ping()) === 'PONG');
    expect(await redis.exists(sessionKey(hash))).toBe(0);
  });

  it('a starting operator waits for its Redis connection instead of turning every Key not Ready', async () => {
    await c.create('Key', ns, { metadata: { name: 'steady' }, spec: { rate: 1, per: 1 } });
    const before = await waitFor('Key Ready', async () => {
      const key = await c.get('Key', ns, 'steady');
      return ready(key)?.status === 'True' ? key : undefined;
    });
    await operator.stop();
    // Redis answers a new connection only after a second, as on a busy node.
    slowProxy = await slowRedisProxy(redisServer.url, 1_000);
    operator = await startOperator(kc, { redisUrl: `redis://127.0.0.1:${(slowProxy.address() as AddressInfo).port}`, watchNamespaces: ns });
    await waitFor('Key reconciled by the new operator', async () => (await reconciles(operator)).success >= 1);
    expect((await reconciles(operator)).error).toBe(0);
    const after = await c.get('Key', ns, 'steady');
    expect(ready(after)).toEqual(ready(before));
    expect(after?.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
  });
});

async function reconciles(operator: Operator): Promise<{ success: number; error: number }> {
  const text = await (await fetch(`http://127.0.0.1:${operator.healthPort()}/metrics`)).text();
  const count = (result: string): number => Number(new RegExp(`^gw_operator_reconciles_total\\{kind="Key",result="${result}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { success: count('success'), error: count('error') };
}

/** A loopback TCP proxy to `url`'s Redis that holds each new connection `delayMs` before passing bytes. */
async function slowRedisProxy(url: string, delayMs: number): Promise<Server> {
  const target = new URL(url);
  const server = createServer((socket) => {
    socket.pause();
    setTimeout(() => {
      const upstream = connect(Number(target.port), target.hostname);
      upstream.on('error', () => socket.destroy());
      socket.on('error', () => upstream.destroy());
      socket.pipe(upstream).pipe(socket);
      socket.resume();
    }, delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}
