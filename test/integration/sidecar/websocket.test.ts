import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { createNamespace } from '../../harness/index.ts';
import { compiledApi, deployApi, newRedis, sidecarOptions, startTestSidecar, storeSession, uniqueId } from './helpers.ts';

type Outcome =
  | { opened: true; echo: string; path: string; headers: Record<string, string | string[] | undefined> }
  | { opened: false; status: number; body: string; requestId: string | undefined };

/** Open a WebSocket through the gateway, send one message, return the echo or the refusal. */
function tryWebSocket(url: string, headers: Record<string, string>): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    const timer = setTimeout(() => reject(new Error('websocket test timed out')), 10_000);
    let switched: Record<string, string | string[] | undefined> = {};
    ws.on('upgrade', (res) => {
      switched = res.headers;
    });
    ws.on('open', () => ws.send('ping'));
    ws.on('message', (data) => {
      clearTimeout(timer);
      const [path, echo] = String(data).split('|');
      ws.close();
      resolve({ opened: true, echo: echo ?? '', path: path ?? '', headers: switched });
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
    upstream = new WebSocketServer({ port: 0, host: '127.0.0.1', verifyClient: ({ req }: { req: IncomingMessage }) => !String(req.url).startsWith('/refused') });
    await new Promise((resolve) => upstream.once('listening', resolve));
    upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    upstream.on('connection', (socket, req) => socket.on('message', (data) => socket.send(`${req.url}|${String(data)}`)));
    // The upstream's own request id and rate headers, which the gateway's must replace.
    upstream.on('headers', (headers) => headers.push('X-Request-Id: from-upstream', 'X-RateLimit-Limit: 999', 'X-RateLimit-Remaining: 999', 'X-Upstream: kept'));
    namespace = await createNamespace(`sc-ws-${forwarder}`);
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_FORWARDER: forwarder, GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' } });
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

    const first = await tryWebSocket(url, { authorization: key });
    expect(first).toMatchObject({ opened: true, echo: 'ping', path: '/chat' });
    // The 101 carries the gateway's request id and the admission's rate headers, as any answer does.
    expect(first.opened && first.headers).toMatchObject({
      'x-request-id': expect.stringMatching(/^[0-9a-f-]{36}$/),
      'x-ratelimit-limit': '2',
      'x-ratelimit-remaining': '1',
      'x-ratelimit-reset': expect.stringMatching(/^\d+$/),
      'x-upstream': 'kept',
    });
    // An upgrade the upstream declines: its answer reaches the client with the gateway's id.
    expect(await tryWebSocket(`${sidecar.proxyUrl.replace('http', 'ws')}/${api.api_id}/refused`, { authorization: key, 'x-request-id': 'declined-id' })).toEqual({
      opened: false,
      status: 401,
      body: 'Unauthorized',
      requestId: 'declined-id',
    });
    expect(await tryWebSocket(url, { authorization: key })).toEqual({
      opened: false,
      status: 429,
      body: '{"error":"API Rate Limit Exceeded"}',
      requestId: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
  });

  it('answers an upgrade with the request id the client chose', async () => {
    const api = compiledApi(uniqueId('ws-id'), upstreamUrl, { keyless: true, api_limit: { rate: 5, per: 60 } });
    await deployApi(sidecar, namespace, api);
    const url = `${sidecar.proxyUrl.replace('http', 'ws')}/${api.api_id}/chat`;
    const second = await tryWebSocket(url, { 'x-request-id': 'client-chosen-id' });
    expect(second.opened && second.headers).toMatchObject({ 'x-request-id': 'client-chosen-id', 'x-ratelimit-limit': '5', 'x-ratelimit-remaining': '4' });
  });
});
