import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { HandSource } from '../../support/hand-source.ts';
import { call, compiledApi, compiledConfig, eventually, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/** An upstream that keeps idle connections for a minute and tracks which are open. */
interface TrackedUpstream {
  url: string;
  open: Set<Socket>;
  accepted: number;
  close(): Promise<void>;
}

async function trackedUpstream(): Promise<TrackedUpstream> {
  const open = new Set<Socket>();
  // `/slow` is answered after 500 ms, anything else at once.
  const server: Server = createServer((req, res) => {
    if (req.url === '/slow') setTimeout(() => res.end('ok'), 500);
    else res.end('ok');
  });
  // Longer than the test: a connection that closes was closed by the gateway.
  server.keepAliveTimeout = 60_000;
  const tracked = {
    url: '',
    open,
    accepted: 0,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  server.on('connection', (socket: Socket) => {
    tracked.accepted += 1;
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  tracked.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return tracked;
}

describe.each(['undici', 'http-proxy'] as const)('upstream connection pools across config swaps (forwarder %s)', (forwarder) => {
  let kept: TrackedUpstream;
  let dropped: TrackedUpstream;
  let source: HandSource;
  let sidecar: RunningSidecar;
  const keptApi = compiledApi(uniqueId('kept'), 'http://127.0.0.1:1');
  const droppedApi = compiledApi(uniqueId('dropped'), 'http://127.0.0.1:1');

  beforeAll(async () => {
    [kept, dropped] = await Promise.all([trackedUpstream(), trackedUpstream()]);
    keptApi.target_url = kept.url;
    droppedApi.target_url = dropped.url;
    source = new HandSource(compiledConfig([keptApi, droppedApi]));
    sidecar = await startTestSidecar(sidecarOptions('default'), { source, env: { GW_FORWARDER: forwarder } });
  }, 30_000);

  afterAll(async () => {
    await sidecar?.close();
    await Promise.all([kept?.close(), dropped?.close()]);
  }, 30_000);

  it('closes the pool of an origin no route reaches any more, and keeps the others', async () => {
    expect((await call(`${sidecar.proxyUrl}/${keptApi.api_id}/a`)).status).toBe(200);
    expect((await call(`${sidecar.proxyUrl}/${droppedApi.api_id}/a`)).status).toBe(200);
    expect(dropped.open.size).toBe(1);
    expect(kept.open.size).toBe(1);

    source.publish(compiledConfig([keptApi]));
    await eventually(() => dropped.open.size === 0, 5000, 'the dropped origin’s connection closed');
    expect((await call(`${sidecar.proxyUrl}/${droppedApi.api_id}/a`)).status).toBe(404);

    // The kept origin's pool is the same one: its keep-alive connection is reused.
    expect((await call(`${sidecar.proxyUrl}/${keptApi.api_id}/b`)).status).toBe(200);
    expect(kept.open.size).toBe(1);
    expect(kept.accepted).toBe(1);
  }, 20_000);

  it('opens a fresh pool when an origin comes back', async () => {
    source.publish(compiledConfig([keptApi, droppedApi]));
    await eventually(() => sidecar.runtime.apis().length === 2, 5000, 'the API back');
    expect((await call(`${sidecar.proxyUrl}/${droppedApi.api_id}/again`)).status).toBe(200);
    expect(dropped.accepted).toBe(2);
  }, 20_000);

  it('serves a request in flight to an origin no route reaches any more, then closes its connection', async () => {
    const answer = call(`${sidecar.proxyUrl}/${droppedApi.api_id}/slow`);
    // At the upstream, on the connection the last test left open.
    await new Promise((resolve) => setTimeout(resolve, 200));
    source.publish(compiledConfig([keptApi]));
    await eventually(() => sidecar.runtime.apis().length === 1, 5000, 'the API gone');
    expect((await answer).status).toBe(200);
    await eventually(() => dropped.open.size === 0, 5000, 'the dropped origin’s connection closed once free');
  }, 20_000);
});
