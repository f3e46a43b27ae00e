import { Agent, createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, deployApi, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/** Longer than the test could need: the stop must end with its last answer, not with this. */
const DRAIN_MS = 8000;
/** How long the upstream takes to answer each request. */
const ANSWER_MS = 400;

interface Outcome {
  status?: number;
  headers?: IncomingHttpHeaders;
  /** The request's error code (ECONNREFUSED: the gateway no longer listens; ECONNRESET: cut). */
  error?: string;
  /** Whether it went out on a connection already open. */
  reused: boolean;
}

/** One request on the client's single keep-alive connection, if it has one open. */
function get(url: string, agent: Agent): Promise<Outcome> {
  return new Promise((resolve) => {
    const req = request(url, { agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, reused: req.reusedSocket }));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message, reused: req.reusedSocket }));
    req.end();
  });
}

/**
 * README.md#the-sidecar-gw-sidecar: a stopping gateway drains. A client that sends request after
 * request on one keep-alive connection gets each answer in flight whole, the one answered during
 * the stop saying `Connection: close`, and no request cut; the stop ends with that answer rather
 * than at the drain's end, and /readyz says `stopping` meanwhile.
 */
describe('a gateway stopping under keep-alive traffic', () => {
  let upstream: Server;

  afterAll(async () => {
    upstream?.closeAllConnections();
    await new Promise((resolve) => upstream?.close(resolve));
  });

  it('answers the request in flight with Connection: close, cuts none, reports stopping, and stops with its last answer', async () => {
    const namespace = await createNamespace('sc-ka-drain');
    upstream = createServer((_req, res) => setTimeout(() => res.end('ok'), ANSWER_MS));
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const sidecar = await startTestSidecar(sidecarOptions(namespace), { drainMs: DRAIN_MS });
    const api = compiledApi(uniqueId('ka'), `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
    await deployApi(sidecar, namespace, api);
    const url = `${sidecar.proxyUrl}${api.listen_path}x`;
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });

    // Request after request on one connection, the stop begun while the third is in flight.
    const outcomes: Outcome[] = [];
    let stopped: Promise<number> | undefined;
    let readyDuringStop: { status: number; body: string } | undefined;
    const started = performance.now();
    for (let i = 0; i < 10; i += 1) {
      const next = get(url, agent);
      if (i === 2) {
        await new Promise((resolve) => setTimeout(resolve, ANSWER_MS / 4));
        stopped = sidecar.close().then(() => performance.now() - started);
        const ready = await call(`${sidecar.healthUrl}/readyz`);
        readyDuringStop = { status: ready.status, body: ready.text };
      }
      const outcome = await next;
      outcomes.push(outcome);
      if (outcome.error !== undefined) break;
    }
    agent.destroy();
    const stopAt = await stopped!;

    // Two answers before the stop, on the same connection; the third answered whole, closing it.
    expect(outcomes.slice(0, 3).map((o) => o.status)).toEqual([200, 200, 200]);
    expect(outcomes.slice(0, 3).map((o) => o.reused)).toEqual([false, true, true]);
    expect(outcomes[1]!.headers!.connection).toBe('keep-alive');
    expect(outcomes[2]!.headers!.connection).toBe('close');
    // The next goes on a new connection, which the stopping gateway no longer takes: refused, not cut.
    expect(outcomes.slice(3)).toEqual([{ error: 'ECONNREFUSED', reused: false }]);
    expect(readyDuringStop?.status).toBe(503);
    expect(readyDuringStop?.body).toContain('stopping');
    // With the last answer (the third request's, at about 3 answers' time), not at the drain's end.
    expect(stopAt).toBeLessThan(3 * ANSWER_MS + 2000);
  }, 30_000);
});
