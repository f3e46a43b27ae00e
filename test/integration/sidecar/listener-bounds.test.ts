import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { LISTENER_BOUNDS } from '../../../sidecar/bounded-server.ts';
import { gatewayErrors, type GatewayError } from '../../../sidecar/http/errors.ts';
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

const gatewayBody = (message: string): string => JSON.stringify({ error: message });
const dashboardBody = (message: string): string => JSON.stringify({ Status: 'Error', Message: message, Meta: null });

const headerLines = (count: number): string => Array.from({ length: count }, (_, i) => `X-H${i}: v\r\n`).join('');

describe('every listener bounds what one client may hold', () => {
  let sidecar: RunningSidecar;

  beforeAll(async () => {
    sidecar = await startTestSidecar(sidecarOptions(await createNamespace('sc-bounds')), { headersTimeoutMs: HEADERS_TIMEOUT_MS });
  });

  afterAll(async () => {
    await sidecar?.close();
  });

  /** Each listener, a path on it, and its refusals' body shape there (the admin listener's: the gateway operations', by the path). */
  const listeners = (): Array<[string, string, string, (message: string) => string]> => [
    ['proxy', sidecar.proxyUrl, '/nothing/here', gatewayBody],
    ['admin', sidecar.adminUrl, '/gw/apis/x', (message) => JSON.stringify({ status: 'error', message })],
    ['health', sidecar.healthUrl, '/healthz', gatewayBody],
  ];

  it('the health listener answers an unknown path and another method than GET or HEAD with their code, the 405 with Allow', async () => {
    const unknown = await call(`${sidecar.healthUrl}/nope`);
    expect([unknown.status, unknown.headers['x-gw-error-code'], unknown.text]).toEqual([404, 'not_found', gatewayBody('Not found')]);
    const posted = await call(`${sidecar.healthUrl}/healthz`, { method: 'POST' });
    expect([posted.status, posted.headers['x-gw-error-code'], posted.headers.allow, posted.text]).toEqual([405, 'method_not_allowed', 'GET, HEAD', gatewayBody('Method not allowed')]);
  });

  it('answers what Node would answer with an empty body in the JSON error shape: no Host or two, another expectation, CONNECT', async () => {
    for (const [name, url, path, body] of listeners()) {
      const cases: Array<[string, GatewayError, string]> = [
        [`GET ${path} HTTP/1.1\r\nConnection: close\r\n\r\n`, gatewayErrors.badHost, body(gatewayErrors.badHost.message)],
        [`GET ${path} HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n`, gatewayErrors.badHost, body(gatewayErrors.badHost.message)],
        [`GET ${path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n`, gatewayErrors.expectationFailed, body(gatewayErrors.expectationFailed.message)],
        // CONNECT's target names no path: the admin listener answers it in the dashboard shape.
        [`CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n`, gatewayErrors.connectNotServed,
          name === 'admin' ? dashboardBody(gatewayErrors.connectNotServed.message) : body(gatewayErrors.connectNotServed.message)],
      ];
      for (const [request, error, shaped] of cases) {
        const { answer } = await exchange(url, request);
        expect(answer, `${name}: ${request}`).toMatch(new RegExp(`^HTTP/1\\.1 ${error.status} `));
        expect(answer, `${name}: ${request}`).toContain(`x-gw-error-code: ${error.code}`);
        expect(answer, `${name}: ${request}`).toMatch(uuidRequestId);
        expect(answer.endsWith(`\r\n\r\n${shaped}`), `${name}: ${request}\n${answer}`).toBe(true);
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
    for (const [name, url, path, body] of listeners()) {
      const host = 'Host: x\r\nConnection: close\r\n';
      const over = await exchange(url, `GET ${path} HTTP/1.1\r\n${host}${headerLines(LISTENER_BOUNDS.maxHeaderCount - 1)}\r\n`);
      expect(over.answer, name).toMatch(/^HTTP\/1\.1 431 /);
      expect(over.answer, name).toContain('x-gw-error-code: too_many_headers');
      expect(over.answer, name).toContain(body('Too many request header fields'));
      expect(over.answer, name).toMatch(uuidRequestId);
      // Host and Connection count too: this request has exactly the bound.
      const at = await exchange(url, `GET ${path} HTTP/1.1\r\n${host}${headerLines(LISTENER_BOUNDS.maxHeaderCount - 2)}\r\n`);
      expect(at.answer, name).not.toMatch(/^HTTP\/1\.1 431 /);
    }
  });

  it('refuses headers over the size bound with 431', async () => {
    for (const [name, url, path, body] of listeners()) {
      const huge = await exchange(url, `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(LISTENER_BOUNDS.maxHeaderBytes + 1)}\r\n\r\n`);
      expect(huge.answer, name).toMatch(/^HTTP\/1\.1 431 /);
      expect(huge.answer, name).toContain(body('Request header fields too large'));
      // No request was read: a new id.
      expect(huge.answer, name).toMatch(uuidRequestId);
    }
  });

  it("counts the proxy listener's own refusals under api=\"\", by code and by status class", async () => {
    const series = async (): Promise<Map<string, number>> => {
      const text = (await call(`${sidecar.healthUrl}/metrics`)).text;
      return new Map([...text.matchAll(/^(gw_(?:gateway_errors|requests)_total\{api="",[^}]*\}) (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
    };
    const before = await series();
    const path = '/nothing/here';
    const refusals: Array<[string, GatewayError]> = [
      [`GET ${path} HTTP/1.1\r\nConnection: close\r\n\r\n`, gatewayErrors.badHost],
      [`GET ${path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n`, gatewayErrors.expectationFailed],
      [`CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n`, gatewayErrors.connectNotServed],
      [`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${headerLines(LISTENER_BOUNDS.maxHeaderCount)}\r\n`, gatewayErrors.tooManyHeaders],
      [`GET ${path} HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(LISTENER_BOUNDS.maxHeaderBytes + 1)}\r\n\r\n`, gatewayErrors.headersTooLarge],
      ['NOT HTTP AT ALL\r\n\r\n', gatewayErrors.badRequest],
      [`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n${headerLines(LISTENER_BOUNDS.maxHeaderCount)}\r\n`, gatewayErrors.tooManyHeaders],
    ];
    for (const [request, error] of refusals) expect((await exchange(sidecar.proxyUrl, request)).answer).toContain(`x-gw-error-code: ${error.code}`);
    const after = await series();
    const grew = (name: string): number => (after.get(name) ?? 0) - (before.get(name) ?? 0);
    for (const [code, times] of [['bad_host', 1], ['expectation_failed', 1], ['connect_not_served', 1], ['too_many_headers', 2], ['headers_too_large', 1], ['bad_request', 1]] as const) {
      expect(grew(`gw_gateway_errors_total{api="",code="${code}"}`), code).toBe(times);
    }
    expect(grew('gw_requests_total{api="",code_class="4xx"}')).toBe(6);
    expect(grew('gw_requests_total{api="",code_class="5xx"}')).toBe(1);
  });

  it('answers 408 and closes a connection whose headers do not arrive in time (slowloris), serving others meanwhile', async () => {
    const slow = listeners().map(([name, url, path]) =>
      exchange(url, `GET ${path} HTTP/1.1\r\nHost: x\r\nX-Slow: `, false).then((r) => [name, r] as const));
    // While the slow clients hold their connections, the gateway serves everyone else.
    expect((await call(`${sidecar.healthUrl}/healthz`)).status).toBe(200);
    for (const [name, { answer, closedAfterMs }] of await Promise.all(slow)) {
      expect(answer, name).toMatch(/^HTTP\/1\.1 408 /);
      // No request line was read: the admin listener answers in the dashboard shape.
      expect(answer, name).toContain((name === 'admin' ? dashboardBody : gatewayBody)('Request not received in time'));
      expect(closedAfterMs, name).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 50);
      expect(closedAfterMs, name).toBeLessThan(HEADERS_TIMEOUT_MS + 2500);
    }
    expect((await call(`${sidecar.healthUrl}/healthz`)).status).toBe(200);
  });
});

/** DESIGN.md: bad input gets a clear 4xx in the operation's own error shape, on the admin listener the shape of the path's operation. */
describe("the admin listener's own refusals", () => {
  let sidecar: RunningSidecar;

  beforeAll(async () => {
    sidecar = await startTestSidecar(sidecarOptions(await createNamespace('sc-admin-refusals')));
  });

  afterAll(async () => {
    await sidecar?.close();
  });

  const shapes: Array<[string, (message: string) => string]> = [
    ['/admin/org/keys', dashboardBody],
    ['/api/keys', dashboardBody],
    ['/gw/apis', (message) => JSON.stringify({ status: 'error', message })],
    ['/portal-api/apps', (message) => JSON.stringify({ errors: [message] })],
  ];

  it('answer in the shape of the operation the path names, with their status, code and request id', async () => {
    for (const [path, body] of shapes) {
      const cases: Array<[string, GatewayError]> = [
        [`POST ${path} HTTP/1.1\r\nHost: x\r\nAdmin-Auth: ${'a'.repeat(20_000)}\r\n\r\n`, gatewayErrors.headersTooLarge],
        [`GET ${path} HTTP/1.1\r\nHost: x\r\n${headerLines(LISTENER_BOUNDS.maxHeaderCount)}\r\n`, gatewayErrors.tooManyHeaders],
        [`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, gatewayErrors.badRequest],
        [`GET ${path} HTTP/1.1\r\nConnection: close\r\n\r\n`, gatewayErrors.badHost],
        [`GET http://user@x${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, gatewayErrors.badTarget],
        [`POST ${path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 0\r\n\r\n`, gatewayErrors.expectationFailed],
      ];
      for (const [request, error] of cases) {
        const what = `${path}: ${error.code}`;
        const { answer } = await exchange(sidecar.adminUrl, request);
        expect(answer, what).toMatch(new RegExp(`^HTTP/1\\.1 ${error.status} `));
        expect(answer, what).toContain(`x-gw-error-code: ${error.code}`);
        expect(answer, what).toMatch(uuidRequestId);
        expect(answer.endsWith(`\r\n\r\n${body(error.message)}`), `${what}\n${answer}`).toBe(true);
      }
    }
  });

  it('keep the request id the client gave', async () => {
    const { answer } = await exchange(sidecar.adminUrl, `GET /portal-api/apps HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Request-Id: trace-42\r\n\r\n`);
    expect(answer).toContain('\r\nx-request-id: trace-42\r\n');
    expect(answer.endsWith(JSON.stringify({ errors: [gatewayErrors.badHost.message] }))).toBe(true);
  });

  it('answer in the dashboard shape when Node read no request line', async () => {
    const { answer } = await exchange(sidecar.adminUrl, 'NOT HTTP AT ALL\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer.endsWith(dashboardBody(gatewayErrors.badRequest.message))).toBe(true);
  });
});
