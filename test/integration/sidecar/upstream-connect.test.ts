import { type ChildProcess, spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, deployApi, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

const TIMEOUT_MS = 1500;
/** A loaded CI's share of the wait. */
const SLACK_MS = 1000;

/** Whether a connection to `port` opens within `ms`. */
function opens(port: number, ms: number, held: Socket[]): Promise<boolean> {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  held.push(socket);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * An upstream that never answers a connection, as an address dropping packets does: a process
 * listening with room for one waiting connection, stopped (SIGSTOP) so it accepts none, its
 * queue filled by the test; the kernel then drops every new connection's SYN. `resume` lets it
 * accept again, each connection then answered 200 after `answerAfterMs`.
 */
async function silentUpstream(answerAfterMs: number): Promise<{ origin: string; resume: () => void; stop: () => void }> {
  const script = `const s = require('node:http').createServer((req, res) => setTimeout(() => res.end('late'), ${answerAfterMs}));
s.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => console.log(s.address().port));`;
  const child: ChildProcess = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve) => child.stdout!.once('data', (data) => resolve(Number(String(data).trim()))));
  process.kill(child.pid!, 'SIGSTOP');
  const held: Socket[] = [];
  // The queue holds the backlog and one more: a few tries find it full.
  let full = false;
  for (let tries = 0; tries < 8 && !full; tries++) full = !(await opens(port, 300, held));
  expect(full).toBe(true);
  return {
    origin: `http://127.0.0.1:${port}`,
    resume: () => process.kill(child.pid!, 'SIGCONT'),
    stop: () => {
      child.kill('SIGKILL');
      for (const socket of held) socket.destroy();
    },
  };
}

/**
 * README.md#gateway-settings: the upstream timeout runs from the hand-over to the answer's
 * headers, opening a connection included; an upstream that never takes the connection is
 * answered 504 in that time, not after a connect timeout of the forwarder's own.
 */
describe.each(['undici', 'http-proxy'] as const)('an upstream that does not take the connection (forwarder setting %s)', (forwarder) => {
  let namespace: string;
  let sidecar: RunningSidecar;
  const upstreams: { stop: () => void }[] = [];

  beforeAll(async () => {
    namespace = await createNamespace(`sc-connect-${forwarder}`);
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_FORWARDER: forwarder, GW_UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS) } });
  });

  afterAll(async () => {
    for (const upstream of upstreams) upstream.stop();
    await sidecar?.close();
  });

  async function deploy(origin: string): Promise<string> {
    const api = compiledApi(uniqueId('connect'), origin);
    await deployApi(sidecar, namespace, api);
    return `${sidecar.proxyUrl}${api.listen_path.replace(/\/$/, '')}`;
  }

  it('answers 504 upstream_timeout within the upstream timeout', async () => {
    const upstream = await silentUpstream(0);
    upstreams.push(upstream);
    const base = await deploy(upstream.origin);
    const started = performance.now();
    const answer = await call(`${base}/x`);
    const ms = performance.now() - started;
    expect(answer.status).toBe(504);
    expect(answer.headers['x-gw-error-code']).toBe('upstream_timeout');
    expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    expect(ms).toBeLessThan(TIMEOUT_MS + SLACK_MS);
  }, 20_000);

  it('counts the time a connection took to open against the answer’s', async () => {
    // The connection opens about 1 s in (the kernel sends the dropped SYN again after its
    // first second), and the upstream answers 1 s after the request: 2 s in all, over the 1.5 s.
    const upstream = await silentUpstream(1000);
    upstreams.push(upstream);
    const base = await deploy(upstream.origin);
    setTimeout(upstream.resume, 300);
    const started = performance.now();
    const answer = await call(`${base}/x`);
    const ms = performance.now() - started;
    expect(answer.status).toBe(504);
    expect(ms).toBeLessThan(TIMEOUT_MS + SLACK_MS);
  }, 20_000);
});
