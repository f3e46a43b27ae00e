import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectedWebSocketAccept } from '../../../sidecar/http/websocket-handshake.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { HandSource } from '../../support/hand-source.ts';
import { compiledApi, compiledConfig, sidecarOptions, startTestSidecar, uniqueId, withExpectation } from './helpers.ts';

/**
 * How the gateway frames what it passes on, each way, with either forwarder: a request's body
 * reaches the upstream framed whatever its method (else its bytes are a request of their own,
 * unchecked), the client's hop keeps its own Connection and hop-by-hop headers, interim
 * answers pass, and an upstream that stops mid-body cuts the client's answer short.
 */

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

let upstream: Server;
let upstreamUrl: string;
const seen: Seen[] = [];

beforeAll(async () => {
  upstream = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() });
      if (req.url === '/processing') res.writeProcessing();
      if (req.url === '/hints') res.writeEarlyHints({ link: '</style.css>; rel=preload' });
      if (req.url === '/cut') {
        res.writeHead(200, { 'content-length': '100', connection: 'X-Upstream-Hop, close', 'x-upstream-hop': 'secret' });
        res.write('partial');
        setTimeout(() => res.socket?.destroy(), 50);
        return;
      }
      res.writeHead(200, { connection: 'X-Upstream-Hop', 'x-upstream-hop': 'secret', 'content-type': 'text/plain' });
      res.end('ok');
    });
  });
  upstream.on('upgrade', (req, socket) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: '' });
    // The handshake completed, as the gateway requires of a 101 (RFC 6455 §4.1).
    socket.end(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${expectedWebSocketAccept(req.headers)}\r\n\r\n`);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  upstream.closeAllConnections();
  await new Promise((resolve) => upstream.close(resolve));
});

/** Raw bytes to the gateway; what came back before the connection closed or `waitMs` passed. */
function raw(base: string, bytes: string, waitMs = 1_500): Promise<{ text: string; closed: boolean }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    let text = '';
    const done = (closed: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, closed });
    };
    const timer = setTimeout(() => done(false), waitMs);
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('close', () => done(true));
    socket.on('error', reject);
  });
}

describe.each(['undici', 'http-proxy'])('HTTP framing through the %s forwarder', (forwarder) => {
  let sidecar: RunningSidecar;
  const apiId = uniqueId('framing');
  const api = () =>
    compiledApi(apiId, upstreamUrl, {
      endpoint_limits: [
        { path: '/limited', pattern: '^/limited$', method: 'GET', rate: 1, per: 60 },
        { path: '/upload', pattern: '^/upload$', method: 'POST', rate: 1, per: 60 },
        { path: '/absolute', pattern: '^/absolute$', method: 'GET', rate: 1, per: 60 },
      ],
    });

  beforeAll(async () => {
    sidecar = await startTestSidecar(sidecarOptions('default'), { source: new HandSource(compiledConfig([api()])), env: { GW_FORWARDER: forwarder } });
  });
  afterAll(async () => {
    await sidecar?.close();
  });

  it.each(['GET', 'DELETE', 'OPTIONS', 'POST'])('passes a chunked %s body on framed: the bytes in it reach the upstream as a body, not as a request', async (method) => {
    seen.length = 0;
    const smuggled = `GET /smuggled-${method} HTTP/1.1\r\nHost: internal\r\n\r\n`;
    const chunk = `${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`;
    const { text } = await raw(sidecar.proxyUrl, `${method} /${apiId}/carrier HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunk}`);
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
    // Time for a second request on the upstream's pooled connection, had the bytes gone out unframed.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual([`${method} /carrier`]);
    expect(seen[0]!.body).toBe(smuggled);
  });

  it('matches endpoint limits without the fragment a request-target should not carry, and sends none upstream', async () => {
    seen.length = 0;
    const first = await raw(sidecar.proxyUrl, `GET /${apiId}/limited HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(first.text).toMatch(/^HTTP\/1\.1 200 /);
    const fragment = await raw(sidecar.proxyUrl, `GET /${apiId}/limited#x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(fragment.text).toMatch(/^HTTP\/1\.1 429 /);
    expect(seen.map((s) => s.url)).toEqual(['/limited']);
  });

  it("answers the client's Connection: close and closes, with none of the upstream's hop-by-hop headers", async () => {
    const { text, closed } = await raw(sidecar.proxyUrl, `GET /${apiId}/plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    const head = text.split('\r\n\r\n')[0]!.toLowerCase();
    expect(head).toMatch(/^http\/1\.1 200 /);
    expect(head).toContain('\r\nconnection: close');
    expect(head).not.toContain('x-upstream-hop');
    expect(closed).toBe(true);
  });

  it('passes 102 and 103 interim answers on, then the final answer', async () => {
    for (const [path, interim] of [['processing', '102'], ['hints', '103']] as const) {
      const { text } = await raw(sidecar.proxyUrl, `GET /${apiId}/${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      expect(text).toMatch(/HTTP\/1\.1 200 /);
      if (forwarder === 'undici') expect(text.startsWith(`HTTP/1.1 ${interim} `)).toBe(true);
      expect(text.split(/HTTP\/1\.1 200 [^\r]*\r\n/)[1]).toMatch(/\r\n\r\n(2\r\n)?ok/);
    }
  });

  it('cuts the client short when the upstream stops before its whole body', async () => {
    const { text, closed } = await raw(sidecar.proxyUrl, `GET /${apiId}/cut HTTP/1.1\r\nHost: x\r\n\r\n`, 5_000);
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
    expect(text.endsWith('partial')).toBe(true);
    expect(closed).toBe(true);
  });

  it('passes an upgrade on with Connection and Upgrade, and no other hop-by-hop header', async () => {
    seen.length = 0;
    const upgrade = [
      `GET /${apiId}/ws HTTP/1.1`, 'Host: x', 'Upgrade: websocket', 'Connection: Upgrade, X-Hop', 'X-Hop: secret', 'Proxy-Authorization: Basic Zm9vOmJhcg==',
      'Keep-Alive: 300', 'TE: trailers', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version: 13', '', '',
    ].join('\r\n');
    const { text } = await raw(sidecar.proxyUrl, upgrade);
    expect(text).toMatch(/^HTTP\/1\.1 101 /);
    const headers = seen[0]!.headers;
    expect(headers).toMatchObject({ upgrade: 'websocket', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' });
    expect(headers.connection?.toLowerCase()).toBe('upgrade');
    for (const hop of ['x-hop', 'proxy-authorization', 'keep-alive', 'te']) expect(headers).not.toHaveProperty(hop);
  });

  it('asks for a body (100 Continue) only once the request is admitted, and answers a refused one without it', async () => {
    seen.length = 0;
    const head = `POST /${apiId}/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n`;
    const admitted = await withExpectation(sidecar.proxyUrl, head, 'data');
    expect(admitted.bodySent).toBe(true);
    expect(admitted.text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
    expect(seen.map((s) => [s.url, s.body, s.headers.expect])).toEqual([['/upload', 'data', undefined]]);
    // The endpoint limit (1 per minute) refuses the next one on its headers: no 100, and the
    // connection closes, since the client may send the body it was never asked for.
    const refused = await withExpectation(sidecar.proxyUrl, head, 'data');
    expect(refused.bodySent).toBe(false);
    expect(refused.text).toMatch(/^HTTP\/1\.1 429 /);
    expect(refused.text.toLowerCase()).toContain('x-gw-error-code: api_rate_limited');
    expect(refused.closed).toBe(true);
    // A declared length over the body bound is refused on its headers as well.
    const tooLarge = await withExpectation(sidecar.proxyUrl, `POST /${apiId}/big HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\nExpect: 100-continue\r\n\r\n`, 'data');
    expect(tooLarge.bodySent).toBe(false);
    expect(tooLarge.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(tooLarge.closed).toBe(true);
    expect(seen).toHaveLength(1);
  });

  it('serves a request-target in absolute-form as its path, its authority standing for the Host, under the same limits', async () => {
    seen.length = 0;
    const first = await raw(sidecar.proxyUrl, `GET http://api.example.test/${apiId}/absolute?q=1 HTTP/1.1\r\nHost: elsewhere\r\nConnection: close\r\n\r\n`);
    expect(first.text).toMatch(/^HTTP\/1\.1 200 /);
    expect(seen.map((s) => [s.url, s.headers['x-forwarded-host']])).toEqual([['/absolute?q=1', 'api.example.test']]);
    const second = await raw(sidecar.proxyUrl, `GET /${apiId}/absolute HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(second.text).toMatch(/^HTTP\/1\.1 429 /);
    const withUser = await raw(sidecar.proxyUrl, `GET http://user@api.example.test/${apiId}/plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(withUser.text).toMatch(/^HTTP\/1\.1 400 /);
    expect(withUser.text).toContain('x-gw-error-code: bad_target');
    expect(seen).toHaveLength(1);
  });
});
