import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startRedis, type RedisHandle } from '../../harness/index.ts';
import { HandSource } from '../../support/hand-source.ts';
import { call, compiledApi, compiledConfig, eventually, sidecarOptions, startTestSidecar, storeSession, uniqueId } from './helpers.ts';

/** Requests counted by status class for one API, as the sidecar's metric has them. */
async function counted(sidecar: RunningSidecar, api: string, codeClass: string): Promise<number> {
  const { values } = await sidecar.metrics.requests.get();
  return values.find((v) => v.labels.api === api && v.labels.code_class === codeClass)?.value ?? 0;
}

describe('a client that leaves during admission', () => {
  const received: string[] = [];
  let upstream: Server;
  let redis: RedisHandle;
  let client: Redis;
  let sidecar: RunningSidecar;
  const apiId = uniqueId('abort');

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      received.push(req.url ?? '');
      res.end('ok');
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const { port } = upstream.address() as AddressInfo;
    // An own Redis: the test pauses it, which must not stall anyone else's tests.
    redis = await startRedis();
    client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    const source = new HandSource(compiledConfig([compiledApi(apiId, `http://127.0.0.1:${port}`, { keyless: false })]));
    // A command timeout longer than the pause, so the session read waits instead of failing.
    sidecar = await startTestSidecar(sidecarOptions('default', redis.url), { source, env: { GW_REDIS_TIMEOUT_MS: '5000' } });
  }, 30_000);

  afterAll(async () => {
    await sidecar?.close();
    client?.disconnect();
    await redis?.stop();
    await new Promise((resolve) => upstream?.close(resolve));
  }, 30_000);

  const grant = (): Record<string, unknown> => ({ access_rights: { [apiId]: { api_id: apiId } } });

  it('forwards an admitted request whose client stays', async () => {
    const key = await storeSession(client, grant());
    const res = await call(`${sidecar.proxyUrl}/${apiId}/stays`, { headers: { authorization: key } });
    expect(res.status).toBe(200);
    expect(received).toEqual(['/stays']);
  }, 15_000);

  it('never asks the upstream once the client has gone, and counts the request as client-closed', async () => {
    const key = await storeSession(client, grant());
    const before = { closed: await counted(sidecar, apiId, '4xx'), ok: await counted(sidecar, apiId, '2xx') };
    // Every Redis command now waits 1 s: the session read of the next request with it.
    await client.call('CLIENT', 'PAUSE', '1000', 'ALL');
    const pausedAt = Date.now();
    const leaving = httpRequest(`${sidecar.proxyUrl}/${apiId}/leaves`, { headers: { authorization: key }, agent: false });
    const failure = new Promise<Error>((resolve) => leaving.on('error', resolve));
    leaving.end();
    await sleep(300);
    leaving.destroy();
    expect((await failure).message).toMatch(/socket hang up|aborted/);
    // The session read completes after the pause; the gateway then decides what to do with the request.
    await eventually(async () => (await counted(sidecar, apiId, '4xx')) > before.closed, 10_000, 'the abandoned request counted');
    expect(Date.now() - pausedAt).toBeGreaterThanOrEqual(900);
    await sleep(200);
    expect(received).toEqual(['/stays']);
    expect(await counted(sidecar, apiId, '4xx')).toBe(before.closed + 1);
    expect(await counted(sidecar, apiId, '2xx')).toBe(before.ok);
    // The sidecar serves on afterwards.
    const after = await call(`${sidecar.proxyUrl}/${apiId}/after`, { headers: { authorization: key } });
    expect(after.status).toBe(200);
    expect(received).toEqual(['/stays', '/after']);
  }, 20_000);
});

describe('a client that leaves while the upstream takes its time', () => {
  let upstream: Server;
  const apiId = uniqueId('abort-upstream');
  const sidecars: RunningSidecar[] = [];

  beforeAll(async () => {
    upstream = createServer((_req, res) => void setTimeout(() => res.end('late'), 1_500));
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  });

  afterAll(async () => {
    await Promise.all(sidecars.map((s) => s.close()));
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream?.close(resolve));
  }, 30_000);

  it.each(['undici', 'http-proxy'])('%s: counts it as client-closed, not as an upstream failure', async (forwarder) => {
    const { port } = upstream.address() as AddressInfo;
    const source = new HandSource(compiledConfig([compiledApi(apiId, `http://127.0.0.1:${port}`)]));
    const sidecar = await startTestSidecar(sidecarOptions('default'), { source, env: { GW_FORWARDER: forwarder } });
    sidecars.push(sidecar);
    const leaving = httpRequest(`${sidecar.proxyUrl}/${apiId}/slow`, { agent: false });
    const failure = new Promise<Error>((resolve) => leaving.on('error', resolve));
    leaving.end();
    await sleep(300);
    leaving.destroy();
    expect((await failure).message).toMatch(/socket hang up|aborted/);
    await eventually(async () => (await counted(sidecar, apiId, '4xx')) === 1, 10_000, 'the abandoned request counted');
    expect(await counted(sidecar, apiId, '5xx')).toBe(0);
    const { values } = await sidecar.metrics.gatewayErrors.get();
    expect(values.filter((v) => v.labels.api === apiId)).toEqual([]);
  }, 20_000);
});
