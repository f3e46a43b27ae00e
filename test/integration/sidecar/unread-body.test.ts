import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Forwarder } from '../../../sidecar/proxy/forwarder.ts';
import { HttpProxyForwarder } from '../../../sidecar/proxy/http-proxy-forwarder.ts';
import { UndiciForwarder } from '../../../sidecar/proxy/undici-forwarder.ts';

const options = { timeoutMs: () => 2000, maxBodyBytes: () => 10_000_000 };

async function closedPort(): Promise<number> {
  const probe = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => probe.once('listening', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** Sends a large body on a raw keep-alive connection; resolves with what came back and when the connection ended. */
function postLargeBody(port: number): Promise<{ response: string; closedAfterMs: number }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect(port, '127.0.0.1');
    const body = Buffer.alloc(1_000_000, 'x');
    let response = '';
    socket.on('data', (chunk: Buffer) => (response += chunk.toString()));
    // The server may close while the body is still being written: that is the point.
    socket.on('error', () => undefined);
    socket.on('close', () => resolve({ response, closedAfterMs: Date.now() - started }));
    socket.write(`POST /orders HTTP/1.1\r\nHost: gw.test\r\nContent-Length: ${body.length}\r\n\r\n`);
    socket.write(body);
  });
}

describe.each([
  ['undici', () => new UndiciForwarder(options)],
  ['http-proxy', () => new HttpProxyForwarder(options)],
] as const)('an upstream failure before the body is read, through the %s forwarder', (_name, make) => {
  let forwarder: Forwarder;
  let server: Server;
  let origin: string;

  beforeAll(async () => {
    forwarder = make();
    origin = `http://127.0.0.1:${await closedPort()}`;
    server = createServer((req, res) => void forwarder.forward({ req, res, origin, path: req.url ?? '/', rateHeaders: null }));
    server.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await forwarder.close();
  });

  it('answers 502 and closes the connection instead of keeping it alive behind unread bytes', { timeout: 10_000 }, async () => {
    const { response, closedAfterMs } = await postLargeBody((server.address() as AddressInfo).port);
    expect(response).toMatch(/^HTTP\/1\.1 502 /);
    expect(response).toMatch(/\r\nConnection: close\r\n/i);
    expect(response.endsWith('{"error":"Upstream unreachable"}')).toBe(true);
    // Kept alive, the connection would only end at the server's keep-alive timeout (5 s).
    expect(closedAfterMs).toBeLessThan(3000);
  });
});
