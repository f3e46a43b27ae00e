import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { CONNECTIONS_PER_ORIGIN } from '../../../sidecar/proxy/forwarder.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, deployApi, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

const TIMEOUT_MS = 1500;
/** undici keeps time on a half-second tick for timeouts of a second or more (README.md#gateway-settings); the rest is a loaded CI's. */
const SLACK_MS = 1500;

/**
 * README.md#gateway-settings: past the connections a gateway opens to one origin, a request
 * waits for one, and upstream_timeout_ms still runs from the hand-over; one that runs out of
 * time waiting is answered 504 and never sent.
 */
describe.each(['undici', 'http-proxy'] as const)('upstream connections through the %s forwarder', (forwarder) => {
  let namespace: string;
  let upstream: Server;
  let sidecar: RunningSidecar;
  const received = { queued: 0, ids: new Set<string>() };

  beforeAll(async () => {
    namespace = await createNamespace(`sc-conns-${forwarder}`);
    // `/hang` is never answered; `/stream` sends a byte every 300 ms for 4.5 s (it holds its
    // connection, never idle for long); anything else is answered at once.
    upstream = createServer((req, res) => {
      if (req.url === '/hang') return;
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        let sent = 0;
        const tick = setInterval(() => {
          sent += 1;
          if (sent < 15) res.write('.');
          else {
            clearInterval(tick);
            res.end('.');
          }
        }, 300);
        return;
      }
      if (req.url === '/queued') received.queued += 1;
      received.ids.add(String(req.headers['x-request-id']));
      res.end('ok');
    });
    upstream.maxConnections = 1000;
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_FORWARDER: forwarder, GW_UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS) } });
  });

  afterAll(async () => {
    await sidecar?.close();
    upstream?.closeAllConnections();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  async function deploy(): Promise<string> {
    const api = compiledApi(uniqueId('api'), `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
    await deployApi(sidecar, namespace, api);
    return `${sidecar.proxyUrl}${api.listen_path.replace(/\/$/, '')}`;
  }

  /** `count` requests at once, each with its answer's status, code and time. */
  const concurrently = (count: number, url: string) => Promise.all(Array.from({ length: count }, async () => {
    const started = performance.now();
    const res = await call(url);
    return { status: res.status, code: res.headers['x-gw-error-code'], text: res.text, ms: performance.now() - started };
  }));

  it('answers 504 in time behind a hung upstream, queued or not, then serves the next request', async () => {
    const base = await deploy();
    const answers = await concurrently(CONNECTIONS_PER_ORIGIN + 72, `${base}/hang`);
    expect(answers.filter((a) => a.status !== 504 || a.code !== 'upstream_timeout')).toEqual([]);
    expect(Math.max(...answers.map((a) => a.ms))).toBeLessThan(TIMEOUT_MS + SLACK_MS);

    const started = performance.now();
    const next = await call(`${base}/x`);
    expect(next.status).toBe(200);
    expect(next.text).toBe('ok');
    expect(performance.now() - started).toBeLessThan(500);
  });

  it('never sends a request that ran out of time waiting for a connection', async () => {
    const base = await deploy();
    const streams = concurrently(CONNECTIONS_PER_ORIGIN, `${base}/stream`);
    // Every connection busy (the 128 streams hold them), the next ones wait in line.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const queued = await concurrently(20, `${base}/queued`);
    expect(queued.filter((a) => a.status !== 504 || a.code !== 'upstream_timeout')).toEqual([]);
    expect(Math.max(...queued.map((a) => a.ms))).toBeLessThan(TIMEOUT_MS + SLACK_MS);
    expect((await streams).filter((a) => a.status !== 200 || a.text !== '.'.repeat(15))).toEqual([]);
    const next = await call(`${base}/x`);
    expect(next.status).toBe(200);
    expect(received.queued).toBe(0);
  });

  it('never sends a request whose client left while it waited for a connection', async () => {
    const base = await deploy();
    const streams = concurrently(CONNECTIONS_PER_ORIGIN, `${base}/stream`);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const ids = Array.from({ length: 10 }, (_, i) => `left-in-line-${forwarder}-${i}`);
    // Each client sends its body, then leaves before its turn for a connection comes.
    await Promise.all(ids.map((id) => new Promise<void>((resolve) => {
      const req = httpRequest(`${base}/left`, { method: 'POST', agent: false, headers: { 'x-request-id': id, 'content-type': 'text/plain' } });
      req.on('error', () => resolve());
      req.end('a body nobody reads');
      setTimeout(() => req.destroy(), 200);
    })));
    // The streams end and free their connections, which the waiting requests would have had.
    expect((await streams).filter((a) => a.status !== 200)).toEqual([]);
    expect((await call(`${base}/x`)).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(ids.filter((id) => received.ids.has(id))).toEqual([]);
  }, 20_000);
});
