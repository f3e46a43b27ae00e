import { Agent, request } from 'node:http';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { testEnv } from '../../harness/index.ts';
import { keylessApiYaml } from '../../support/api-yaml.ts';
import { sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/**
 * A body too large for a listener is answered with 413 before it has been read. Closing
 * the connection then, with the client still sending, resets it, and the reset destroys
 * the answer on the client's side: every answer must arrive, on both listeners.
 */

const MB = 1024 * 1024;
const TRIES = 50;

interface Outcome {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** A socket error (ECONNRESET, EPIPE) seen by the client: its answer may be lost. */
  error: string | null;
}

type Framing = 'content-length' | 'chunked';
/** `close`: the client announces the exchange as its last (Connection: close); `keep-alive`: it does not. */
type Connection = 'close' | 'keep-alive';

/** One POST of `size` bytes on a fresh connection, written at once as a client would. */
function post(url: string, headers: Record<string, string>, size: number, framing: Framing, connection: Connection): Promise<Outcome> {
  return new Promise((resolve) => {
    const outcome: Outcome = { status: 0, headers: {}, body: '', error: null };
    const agent = connection === 'close' ? false : new Agent({ keepAlive: true });
    let settled = false;
    const settle = (): void => {
      if (settled) return;
      settled = true;
      if (agent) agent.destroy();
      resolve(outcome);
    };
    const length = framing === 'content-length' ? { 'content-length': String(size) } : {};
    const req = request(url, { method: 'POST', agent, headers: { ...headers, ...length } }, (res) => {
      outcome.status = res.statusCode ?? 0;
      outcome.headers = res.headers;
      res.on('data', (chunk: Buffer) => (outcome.body += chunk.toString()));
      res.on('end', settle);
      res.on('error', (err) => {
        outcome.error = (err as NodeJS.ErrnoException).code ?? err.message;
        settle();
      });
    });
    req.on('error', (err) => {
      outcome.error = (err as NodeJS.ErrnoException).code ?? err.message;
      settle();
    });
    req.setTimeout(30_000, () => req.destroy(new Error('timed out')));
    const piece = Buffer.alloc(MB, 'x');
    for (let sent = 0; sent < size; sent += MB) req.write(piece.subarray(0, Math.min(MB, size - sent)));
    req.end();
  });
}

describe('oversized bodies always get their 413 answer', () => {
  let upstream: EchoUpstream;
  let upstreamRequests = 0;
  let dir: string;
  let sidecar: RunningSidecar;
  const adminSecret = 'oversized-admin-secret';

  beforeAll(async () => {
    upstream = await startEchoUpstream();
    upstream.server.on('request', () => (upstreamRequests += 1));
    dir = await mkdtemp(join(tmpdir(), 'gw-oversized-'));
    await writeFile(join(dir, 'api.yaml'), keylessApiYaml('uploads', '/uploads/', upstream.url));
    sidecar = await startTestSidecar({ ...sidecarOptions('default', testEnv().redisUrl), configDir: dir, instanceId: uniqueId('oversized'), adminSecret });
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const adminCase = { path: '/admin/org/keys', size: 10 * MB, answer: { Status: 'Error', Message: 'Request body too large: at most 1048576 bytes', Meta: null } };
  // 11 MB: over the default max_request_body_bytes (10 MiB). Chunked, the body is cut off while it streams upstream.
  const proxyCase = { path: '/uploads/files', size: 11 * MB, answer: { error: 'Request body too large' } };
  it.each([
    ['admin', 'content-length', 'close', adminCase],
    ['admin', 'content-length', 'keep-alive', adminCase],
    ['admin', 'chunked', 'close', adminCase],
    ['proxy', 'content-length', 'close', proxyCase],
    ['proxy', 'content-length', 'keep-alive', proxyCase],
    ['proxy', 'chunked', 'close', proxyCase],
  ] as const)(
    `%s: ${TRIES} successive oversized bodies (%s, connection %s) get ${TRIES} answers of 413 in the error shape, no reset, nothing written or sent upstream`,
    { timeout: 300_000 },
    async (listener, framing, connection, target) => {
      const files = await readdir(dir);
      const upstreamBefore = upstreamRequests;
      const base = listener === 'admin' ? sidecar.adminUrl : sidecar.proxyUrl;
      const headers: Record<string, string> = listener === 'admin' ? { 'admin-auth': adminSecret, 'content-type': 'application/json' } : { 'content-type': 'application/octet-stream' };
      const outcomes: Outcome[] = [];
      for (let i = 0; i < TRIES; i++) outcomes.push(await post(`${base}${target.path}`, headers, target.size, framing, connection));
      expect(outcomes.filter((o) => o.error !== null).map((o) => o.error)).toEqual([]);
      expect(outcomes.map((o) => o.status)).toEqual(Array(TRIES).fill(413));
      for (const outcome of outcomes) expect(JSON.parse(outcome.body)).toEqual(target.answer);
      if (listener === 'admin') expect(outcomes.map((o) => o.headers['x-gw-error-code'])).toEqual(Array(TRIES).fill('body_too_large'));
      expect(await readdir(dir)).toEqual(files);
      // A chunked body is streamed upstream until it passes the limit, so the upstream may see the start of it.
      if (framing === 'content-length') expect(upstreamRequests).toBe(upstreamBefore);
    },
  );

  it('keeps the connection usable after a 413: the next request on it is answered', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const sockets = new Set<unknown>();
      const once = (size: number): Promise<number> =>
        new Promise((resolve, reject) => {
          const req = request(`${sidecar.proxyUrl}/uploads/files`, { method: 'POST', agent, headers: { 'content-length': String(size) } }, (res) => {
            sockets.add(res.socket);
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          });
          req.on('error', reject);
          req.end(Buffer.alloc(size, 'y'));
        });
      expect(await once(11 * MB)).toBe(413);
      expect(await once(10)).toBe(200);
      expect(sockets.size).toBe(1);
    } finally {
      agent.destroy();
    }
  });
});
