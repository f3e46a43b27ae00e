import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { createNamespace } from '../../harness/index.ts';
import { compiledApi, deployApi, eventually, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/** The test sidecar's drain (helpers.ts). */
const DRAIN_MS = 2000;
/** A loaded CI's share of the wait. */
const SLACK_MS = 2000;

/**
 * README.md#the-sidecar-gw-sidecar: a stopping gateway lets in-flight work finish within its
 * drain, then cuts what is left, open WebSockets included, and stops; each tunnel's upstream
 * connection closes with it.
 */
describe('a gateway stopping with WebSockets open', () => {
  let upstream: Server;
  /** The upstream's tunnel connections, while open. */
  const tunnels = new Set<Socket>();

  afterAll(async () => {
    for (const socket of tunnels) socket.destroy();
    upstream?.closeAllConnections();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  it('cuts them at the end of its drain, and its stop finishes', async () => {
    const namespace = await createNamespace('sc-ws-drain');
    const wss = new WebSocketServer({ noServer: true });
    upstream = createServer((_req, res) => res.end('ok'));
    upstream.on('upgrade', (req, socket: Socket, head) => {
      tunnels.add(socket);
      socket.once('close', () => tunnels.delete(socket));
      wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (data) => ws.send(String(data))));
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const sidecar = await startTestSidecar(sidecarOptions(namespace));
    const api = compiledApi(uniqueId('ws'), `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
    await deployApi(sidecar, namespace, api);
    const clients = Array.from({ length: 3 }, () => new WebSocket(`${sidecar.proxyUrl.replace('http', 'ws')}${api.listen_path}ws`));
    await Promise.all(clients.map((ws) => new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    })));
    // Each tunnel carries messages both ways before the stop.
    const echoes = await Promise.all(clients.map((ws, i) => new Promise<string>((resolve) => {
      ws.once('message', (data) => resolve(String(data)));
      ws.send(`hello ${i}`);
    })));
    expect(echoes).toEqual(['hello 0', 'hello 1', 'hello 2']);
    expect(tunnels.size).toBe(3);

    const closedAfter: number[] = [];
    const started = performance.now();
    for (const ws of clients) ws.once('close', () => closedAfter.push(performance.now() - started));
    const stopped = sidecar.close().then(() => performance.now() - started);
    const stoppedAfter = await Promise.race([stopped, new Promise<number>((resolve) => setTimeout(() => resolve(Infinity), DRAIN_MS + SLACK_MS))]);
    // The drain's time first (an open tunnel is in-flight work), then the cut.
    expect(stoppedAfter).toBeGreaterThanOrEqual(DRAIN_MS - 50);
    expect(stoppedAfter).toBeLessThan(DRAIN_MS + SLACK_MS);
    await eventually(() => closedAfter.length === 3, 2000, 'every client told its tunnel closed');
    await eventually(() => tunnels.size === 0, 2000, 'every tunnel’s upstream connection closed');
  }, 30_000);
});
