import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientGone, type Forwarder } from '../../../sidecar/proxy/forwarder.ts';
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

/**
 * Sends a large body then a second request on one raw keep-alive connection, without
 * waiting for answers; resolves with everything that came back once both answers are in
 * (or the connection ended).
 */
function postLargeBodyThenAgain(port: number): Promise<{ response: string; error: string | null }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const body = Buffer.alloc(1_000_000, 'x');
    let response = '';
    let error: string | null = null;
    const done = (): void => {
      socket.destroy();
      resolve({ response, error });
    };
    socket.on('data', (chunk: Buffer) => {
      response += chunk.toString();
      if (response.split('{"error":"Upstream unreachable"}').length === 3) done();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => (error = err.code ?? err.message));
    socket.on('close', done);
    socket.write(`POST /orders HTTP/1.1\r\nHost: gw.test\r\nContent-Length: ${body.length}\r\n\r\n`);
    socket.write(body);
    socket.write('GET /second HTTP/1.1\r\nHost: gw.test\r\n\r\n');
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
    server = createServer((req, res) => void forwarder.forward({ req, res, origin, path: req.url ?? '/', rateHeaders: null, answerHeaders: {}, signal: clientGone(res) }));
    server.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await forwarder.close();
  });

  it('answers 502, reads the rest of the body, and answers the next request on the same connection', { timeout: 10_000 }, async () => {
    const { response, error } = await postLargeBodyThenAgain((server.address() as AddressInfo).port);
    expect(error).toBeNull();
    const answers = response.split(/(?=HTTP\/1\.1 )/);
    expect(answers).toHaveLength(2);
    for (const answer of answers) {
      expect(answer).toMatch(/^HTTP\/1\.1 502 /);
      expect(answer).toMatch(/\r\nConnection: keep-alive\r\n/i);
      expect(answer.endsWith('{"error":"Upstream unreachable"}')).toBe(true);
    }
  });
});
