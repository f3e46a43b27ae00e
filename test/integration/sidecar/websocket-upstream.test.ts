import { createServer, request as httpRequest, type Server } from 'node:http';
import { once } from 'node:events';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { CONNECTIONS_PER_ORIGIN } from '../../../sidecar/proxy/forwarder.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, deployApi, eventually, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

const TIMEOUT_MS = 1500;
/** A loaded CI's share of the wait. */
const SLACK_MS = 1500;

/** Upgrades counted by status class for one API, as the sidecar's metric has them. */
async function counted(sidecar: RunningSidecar, api: string, codeClass: string): Promise<number> {
  const { values } = await sidecar.metrics.requests.get();
  return values.find((v) => v.labels.api === api && v.labels.code_class === codeClass)?.value ?? 0;
}

interface UpgradeAnswer {
  status: number;
  code: string | string[] | undefined;
  requestId: string | string[] | undefined;
  ms: number;
}

/** A WebSocket opening handshake through the gateway, and the answer that is not a 101 (or a 101). */
function upgrade(url: string, leaveAfterMs?: number, method = 'GET'): Promise<UpgradeAnswer | 'left'> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = httpRequest(url, { method, agent: false, headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } });
    const answer = (status: number, headers: Record<string, string | string[] | undefined>): void => {
      resolve({ status, code: headers['x-gw-error-code'], requestId: headers['x-request-id'], ms: performance.now() - started });
      req.destroy();
    };
    req.on('response', (res) => answer(res.statusCode ?? 0, res.headers));
    req.on('upgrade', (res) => answer(res.statusCode ?? 0, res.headers));
    req.on('error', (err) => (leaveAfterMs === undefined ? reject(err) : resolve('left')));
    req.setTimeout(15_000, () => req.destroy(new Error('upgrade timed out')));
    if (leaveAfterMs !== undefined) setTimeout(() => req.destroy(), leaveAfterMs);
    req.end();
  });
}

interface RefusalBody {
  status: number;
  body: string;
  /** Whether the body came whole (its length's worth, then its end) rather than being cut. */
  whole: boolean;
  /** From the answer's headers to its end or its cut. */
  ms: number;
}

/** An opening handshake the upstream refuses with an answer of its own, read to its end or its cut. */
function refusedUpgrade(url: string): Promise<RefusalBody> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { agent: false, headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } });
    req.on('upgrade', () => reject(new Error('switched protocols')));
    req.on('response', (res) => {
      const started = performance.now();
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('close', () => resolve({ status: res.statusCode ?? 0, body, whole: res.complete, ms: performance.now() - started }));
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error('refusal not read in time')));
    req.end();
  });
}

/**
 * An upstream's raw refusal of an upgrade: its head, saying the body is `length` bytes long. The
 * connection closes after it, as the upgrade handler holds the raw socket and reads no more requests.
 */
const refusalHead = (length: number): string => `HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: ${length}\r\nconnection: close\r\n\r\n`;

/**
 * README.md#gateway-settings: an upgrade the upstream does not answer gets its 504 within
 * upstream_timeout_ms, as any request; neither it nor a client that leaves mid-upgrade keeps an
 * upstream connection, so hung upgrades never use up an origin's connections.
 */
describe.each(['undici', 'http-proxy'] as const)('WebSocket upgrades the upstream does not answer (forwarder setting %s)', (forwarder) => {
  let namespace: string;
  let upstream: Server;
  let sidecar: RunningSidecar;
  /** The upstream's connections that carry a `/hangws` upgrade, while open. */
  const hung = new Set<Socket>();
  /** What reached the upstream over a connection it switched without a WebSocket handshake. */
  const tunnelled: string[] = [];

  beforeAll(async () => {
    namespace = await createNamespace(`sc-ws-hang-${forwarder}`);
    const wss = new WebSocketServer({ noServer: true });
    upstream = createServer((_req, res) => res.end('ok'));
    upstream.maxConnections = 1000;
    // `/hangws` is never answered; `/ws` switches at once and echoes.
    upstream.on('upgrade', (req, socket: Socket, head) => {
      // `/stallws` refuses it, then stops its body half-way; `/slowws` refuses it, its body
      // sent a piece at a time, each gap well within the timeout, all of it well over it.
      if (req.url === '/stallws' || req.url === '/slowws') {
        // The refusal whose body stops holds its connection till the gateway lets go of it.
        if (req.url === '/stallws') hung.add(socket);
        socket.once('end', () => socket.end());
        socket.once('close', () => hung.delete(socket));
        socket.on('error', () => undefined);
        const pieces = req.url === '/stallws' ? 1 : 8;
        socket.write(`${refusalHead(10 * 8)}${'refused. '.padEnd(10)}`);
        let sent = 1;
        const more = setInterval(() => {
          if (sent >= pieces || socket.destroyed) {
            clearInterval(more);
            return;
          }
          socket.write('refused. '.padEnd(10));
          sent += 1;
        }, TIMEOUT_MS / 3);
        return;
      }
      // `/fake101` and `/h2c101` switch without completing the WebSocket handshake (no accept
      // value; another protocol), then read whatever comes as HTTP, as httpbin's /status/101 does.
      if (req.url === '/fake101' || req.url === '/h2c101') {
        socket.on('error', () => undefined);
        socket.once('end', () => socket.end());
        socket.on('data', (chunk: Buffer) => tunnelled.push(chunk.toString('latin1')));
        socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${req.url === '/h2c101' ? 'h2c' : 'websocket'}\r\nconnection: Upgrade\r\n\r\n`);
        return;
      }
      if (req.url === '/hangws') {
        hung.add(socket);
        // The server's sockets are half-open: the gateway's end of one closes it here too.
        socket.once('end', () => socket.end());
        socket.once('close', () => hung.delete(socket));
        return;
      }
      wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (data) => ws.send(String(data))));
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_FORWARDER: forwarder, GW_UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS) } });
  });

  afterAll(async () => {
    for (const socket of hung) socket.destroy();
    upstream?.closeAllConnections();
    await sidecar?.close();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  async function deploy(origin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`): Promise<{ api: string; base: string }> {
    const api = compiledApi(uniqueId('ws'), origin);
    await deployApi(sidecar, namespace, api);
    return { api: api.api_id, base: `${sidecar.proxyUrl}${api.listen_path.replace(/\/$/, '')}` };
  }

  it('answers 504 in time, closes the upstream connections, then serves an upgrade and a request', async () => {
    const { api, base } = await deploy();
    const answers = await Promise.all(Array.from({ length: CONNECTIONS_PER_ORIGIN + 2 }, () => upgrade(`${base}/hangws`)));
    expect(answers.filter((a) => a === 'left' || a.status !== 504 || a.code !== 'upstream_timeout' || typeof a.requestId !== 'string')).toEqual([]);
    expect(Math.max(...answers.map((a) => (a === 'left' ? Infinity : a.ms)))).toBeLessThan(TIMEOUT_MS + SLACK_MS);
    await eventually(() => hung.size === 0, 2000, 'the hung upgrades’ upstream connections closed');

    const ws = new WebSocket(`${base.replace('http', 'ws')}/ws`);
    const echo = await new Promise<string>((resolve, reject) => {
      ws.on('open', () => ws.send('ping'));
      ws.on('message', (data) => resolve(String(data)));
      ws.on('error', reject);
    });
    ws.close();
    expect(echo).toBe('ping');
    const next = await call(`${base}/x`);
    expect(next.status).toBe(200);
    expect(next.text).toBe('ok');
    // Each upgrade counted as it was answered: the gateway's 504s, the one that opened.
    expect(await counted(sidecar, api, '5xx')).toBe(CONNECTIONS_PER_ORIGIN + 2);
    expect(await counted(sidecar, api, '1xx')).toBe(1);
  }, 20_000);

  it('closes the upstream connection of an upgrade whose client left before its answer', async () => {
    const { api, base } = await deploy();
    const started = performance.now();
    const leaving = Promise.all(Array.from({ length: 5 }, () => upgrade(`${base}/hangws`, 200)));
    await eventually(() => hung.size === 5, 1000, 'the upgrades at the upstream');
    expect(await leaving).toEqual(Array(5).fill('left'));
    await eventually(() => hung.size === 0, 5000, 'the left upgrades’ upstream connections closed');
    // Well before the upstream timeout would have closed them.
    expect(performance.now() - started).toBeLessThan(TIMEOUT_MS - 300);
    // As a request whose client left: 499, no upstream failure.
    await eventually(async () => (await counted(sidecar, api, '4xx')) === 5, 2000, 'the left upgrades counted');
    expect(await counted(sidecar, api, '5xx')).toBe(0);
  }, 20_000);

  it('cuts the upstream’s refusal of an upgrade whose body stops, and passes on one whose body keeps coming', async () => {
    const { api, base } = await deploy();
    const [stalled, slow] = await Promise.all([refusedUpgrade(`${base}/stallws`), refusedUpgrade(`${base}/slowws`)]);
    // The first piece came, then nothing: cut after the upstream timeout, both connections closed.
    expect(stalled).toMatchObject({ status: 403, body: 'refused. '.padEnd(10), whole: false });
    expect(stalled.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    expect(stalled.ms).toBeLessThan(TIMEOUT_MS + SLACK_MS);
    // Over twice the timeout in all, never paused that long: it comes whole.
    expect(slow).toMatchObject({ status: 403, body: 'refused. '.padEnd(10).repeat(8), whole: true });
    expect(slow.ms).toBeGreaterThan(2 * TIMEOUT_MS);
    await eventually(() => hung.size === 0, 2000, 'the stalled refusal’s upstream connection closed');
    // Each counted with the upstream's answer, as a request's is.
    expect(await counted(sidecar, api, '4xx')).toBe(2);
  }, 20_000);

  it('answers 502 to a 101 that does not complete the WebSocket handshake, and tunnels nothing past auth and limits', async () => {
    const { api, base } = await deploy();
    const { host, pathname } = new URL(base);
    for (const path of ['/fake101', '/h2c101']) {
      const socket = connect({ host: host.split(':')[0], port: Number(host.split(':')[1]) });
      let received = '';
      socket.setEncoding('latin1');
      socket.on('data', (chunk: string) => (received += chunk));
      const closed = once(socket, 'close');
      await once(socket, 'connect');
      socket.write(`GET ${pathname}${path} HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
      // What a client would send next, if the gateway had switched: a request of its own choosing.
      socket.write(`GET /tunnelled HTTP/1.1\r\nhost: x\r\n\r\n`);
      await closed;
      expect(received, path).toMatch(/^HTTP\/1\.1 502 /);
      expect(received).toContain('x-gw-error-code: upstream_bad_upgrade');
      expect(received).toContain('{"error":"Upstream switched protocols without a WebSocket handshake"}');
      expect(received).not.toContain('101');
    }
    expect(tunnelled.join('')).not.toContain('/tunnelled');
    expect(await counted(sidecar, api, '5xx')).toBe(2);
    expect(await counted(sidecar, api, '1xx')).toBe(0);
    // A real handshake still opens.
    const ws = new WebSocket(`${base.replace('http', 'ws')}/ws`);
    await new Promise<void>((resolve, reject) => {
      ws.on('open', () => resolve());
      ws.on('error', reject);
    });
    ws.close();
  }, 20_000);

  it('answers an upgrade the upstream cannot take, or that is no WebSocket handshake, in the gateway’s shape', async () => {
    const { base } = await deploy('http://127.0.0.1:1');
    expect(await upgrade(`${base}/ws`)).toMatchObject({ status: 502, code: 'upstream_unreachable', requestId: expect.any(String) });
    const { base: served } = await deploy();
    const refusedBefore = await counted(sidecar, '', '4xx');
    expect(await upgrade(`${served}/ws`, undefined, 'POST')).toMatchObject({ status: 400, code: 'bad_upgrade' });
    // Refused before any route: counted as the listener's own refusals are.
    expect(await counted(sidecar, '', '4xx')).toBe(refusedBefore + 1);
  }, 20_000);
});
