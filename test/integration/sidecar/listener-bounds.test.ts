import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { LISTENER_BOUNDS } from '../../../sidecar/bounded-server.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, sidecarOptions, startTestSidecar } from './helpers.ts';

const HEADERS_TIMEOUT_MS = 1000;

/** Sends `bytes` on a new connection and reads until the server closes it (bounded). */
function exchange(url: string, bytes: string, writeEnd = true): Promise<{ answer: string; closedAfterMs: number }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    const giveUp = setTimeout(() => socket.destroy(new Error('the server kept the connection open')), 15_000);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(giveUp);
      resolve({ answer: Buffer.concat(chunks).toString(), closedAfterMs: Date.now() - started });
    });
    if (writeEnd) socket.end(bytes);
    else socket.write(bytes);
  });
}

/** The header of an answer whose request id the gateway made (a UUID). */
const uuidRequestId = /\r\nx-request-id: [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\r\n/;

const headerLines = (count: number): string => Array.from({ length: count }, (_, i) => `X-H${i}: v\r\n`).join('');

describe('every listener bounds what one client may hold', () => {
  let sidecar: RunningSidecar;

  beforeAll(async () => {
    sidecar = await startTestSidecar(sidecarOptions(await createNamespace('sc-bounds')), { headersTimeoutMs: HEADERS_TIMEOUT_MS });
  });

  afterAll(async () => {
    await sidecar?.close();
  });

  const listeners = (): Array<[string, string, string]> => [
    ['proxy', sidecar.proxyUrl, '/nothing/here'],
    ['admin', sidecar.adminUrl, '/gw/apis/x'],
    ['health', sidecar.healthUrl, '/healthz'],
  ];

  it('answers what Node would answer with an empty body in the JSON error shape: no Host or two, another expectation, CONNECT', async () => {
    for (const [name, url, path] of listeners()) {
      const cases: Array<[string, RegExp, string]> = [
        [`GET ${path} HTTP/1.1\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 400 /, 'bad_host'],
        [`GET ${path} HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 400 /, 'bad_host'],
        [`GET ${path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n`, /^HTTP\/1\.1 417 /, 'expectation_failed'],
        [`CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n`, /^HTTP\/1\.1 501 /, 'connect_not_served'],
      ];
      for (const [request, status, code] of cases) {
        const { answer } = await exchange(url, request);
        expect(answer, `${name}: ${request}`).toMatch(status);
        expect(answer, `${name}: ${request}`).toContain(`x-gw-error-code: ${code}`);
        expect(answer, `${name}: ${request}`).toMatch(/\r\n\r\n\{"error":"[^"]+"\}$/);
        expect(answer, `${name}: ${request}`).toMatch(uuidRequestId);
      }
      // A request id the client gave is the answer's, as on every other answer.
      const given = await exchange(url, `GET ${path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nX-Request-Id: trace-41\r\nConnection: close\r\n\r\n`);
      expect(given.answer, name).toContain('\r\nx-request-id: trace-41\r\n');
      // HTTP/1.0 needs no Host.
      const old = await exchange(url, `GET ${path} HTTP/1.0\r\n\r\n`);
      expect(old.answer, name).not.toContain('bad_host');
    }
  });

  it('refuses more header fields than the bound with 431 in the JSON error shape, and takes the bound itself', async () => {
    for (const [name, url, path] of listeners()) {
      const host = 'Host: x\r\nConnection: close\r\n';
      const over = await exchange(url, `GET ${path} HTTP/1.1\r\n${host}${headerLines(LISTENER_BOUNDS.maxHeaderCount - 1)}\r\n`);
      expect(over.answer, name).toMatch(/^HTTP\/1\.1 431 /);
      expect(over.answer, name).toContain('x-gw-error-code: too_many_headers');
      expect(over.answer, name).toContain('{"error":"Too many request header fields"}');
      expect(over.answer, name).toMatch(uuidRequestId);
      // Host and Connection count too: this request has exactly the bound.
      const at = await exchange(url, `GET ${path} HTTP/1.1\r\n${host}${headerLines(LISTENER_BOUNDS.maxHeaderCount - 2)}\r\n`);
      expect(at.answer, name).not.toMatch(/^HTTP\/1\.1 431 /);
    }
  });

  it('refuses headers over the size bound with 431', async () => {
    for (const [name, url, path] of listeners()) {
      const huge = await exchange(url, `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(LISTENER_BOUNDS.maxHeaderBytes + 1)}\r\n\r\n`);
      expect(huge.answer, name).toMatch(/^HTTP\/1\.1 431 /);
      expect(huge.answer, name).toContain('{"error":"Request header fields too large"}');
      // No request was read: a new id.
      expect(huge.answer, name).toMatch(uuidRequestId);
    }
  });

  it('answers 408 and closes a connection whose headers do not arrive in time (slowloris), serving others meanwhile', async () => {
    const slow = listeners().map(([name, url, path]) =>
      exchange(url, `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Slow: `, false).then((r) => [name, r] as const));
    // While the slow clients hold their connections, the gateway serves everyone else.
    expect((await call(`${sidecar.healthUrl}/healthz`)).status).toBe(200);
    for (const [name, { answer, closedAfterMs }] of await Promise.all(slow)) {
      expect(answer, name).toMatch(/^HTTP\/1\.1 408 /);
      expect(answer, name).toContain('{"error":"Request not received in time"}');
      expect(closedAfterMs, name).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 50);
      expect(closedAfterMs, name).toBeLessThan(HEADERS_TIMEOUT_MS + 2500);
    }
    expect((await call(`${sidecar.healthUrl}/healthz`)).status).toBe(200);
  });
});
