import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { createNamespace } from '../../harness/index.ts';
import { compiledApi, deployApi, newRedis, sidecarOptions, startTestSidecar, storeSession, uniqueId } from './helpers.ts';

type Outcome = { opened: true; echo: string; path: string } | { opened: false; status: number; body: string; requestId: string | undefined };

/** Open a WebSocket through the gateway, send one message, return the echo or the refusal. */
function tryWebSocket(url: string, headers: Record<string, string>): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    const timer = setTimeout(() => reject(new Error('websocket test timed out')), 10_000);
    ws.on('open', () => ws.send('ping'));
    ws.on('message', (data) => {
      clearTimeout(timer);
      const [path, echo] = String(data).split('|');
      ws.close();
      resolve({ opened: true, echo: echo ?? '', path: path ?? '' });
    });
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        const requestId = res.headers['x-request-id'];
        resolve({ opened: false, status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), requestId: Array.isArray(requestId) ? requestId[0] : requestId });
      });
    });
    ws.on('error', (err) => {
      if (!String(err.message).includes('Unexpected server response')) reject(err);
    });
  });
}

describe.each(['undici', 'http-proxy'] as const)('WebSocket through the gateway (forwarder setting %s)', (forwarder) => {
  let upstream: WebSocketServer;
  let upstreamUrl: string;
  let sidecar: RunningSidecar;
  let namespace: string;
  const redis = newRedis();

  beforeAll(async () => {
    upstream = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((resolve) => upstream.once('listening', resolve));
    upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    upstream.on('connection', (socket, req) => socket.on('message', (data) => socket.send(`${req.url}|${String(data)}`)));
    namespace = await createNamespace(`sc-ws-${forwarder}`);
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_FORWARDER: forwarder } });
  });

  afterAll(async () => {
    await sidecar?.close();
    for (const client of upstream?.clients ?? []) client.terminate();
    await new Promise((resolve) => upstream?.close(resolve));
    redis.disconnect();
  });

  it('upgrades with a valid key, refuses without one, and applies the API limit at the upgrade', async () => {
    const api = compiledApi(uniqueId('ws'), upstreamUrl, { keyless: false, api_limit: { rate: 2, per: 60 } });
    await deployApi(sidecar, namespace, api);
    const key = await storeSession(redis, { access_rights: { [api.api_id]: { api_id: api.api_id } } });
    const url = `${sidecar.proxyUrl.replace('http', 'ws')}/${api.api_id}/chat`;

    const missing = await tryWebSocket(url, {});
    expect(missing).toEqual({ opened: false, status: 401, body: '{"error":"Authorization field missing"}', requestId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    const denied = await tryWebSocket(url, { authorization: 'wrong' });
    expect(denied).toMatchObject({ opened: false, status: 403 });

    expect(await tryWebSocket(url, { authorization: key })).toEqual({ opened: true, echo: 'ping', path: '/chat' });
    expect(await tryWebSocket(url, { authorization: key })).toMatchObject({ opened: true });
    expect(await tryWebSocket(url, { authorization: key })).toEqual({
      opened: false,
      status: 429,
      body: '{"error":"API Rate Limit Exceeded"}',
      requestId: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
  });
});
