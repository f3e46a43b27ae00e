import { createServer, request as httpRequest } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace } from '../../harness/index.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { call, compiledApi, deployApi, eventually, newRedis, sidecarOptions, startTestSidecar, storeSession, uniqueId } from './helpers.ts';
import type { CompiledApi } from '../../../crds/compiled.ts';
import { LATEST_QUOTA_RENEWAL_SECONDS, LONGEST_QUOTA_PERIOD_SECONDS } from '../../../crds/quota-times.ts';
import { policy } from '../../support/compiled-fixtures.ts';

/** docs/behaviour.md#gateway-answers rows of the proxy side, 502/504/413 and forwarding rules, through each forwarder. */
describe.each(['undici', 'http-proxy'] as const)('proxy through the %s forwarder', (forwarder) => {
  let namespace: string;
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  let redis: Redis;
  const logs: string[] = [];
  /** The warn lines the gateway logged for one request, by its id. */
  const upstreamFailures = (requestId: string): Record<string, unknown>[] =>
    logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.reqId === requestId && line.msg === 'upstream failed');

  beforeAll(async () => {
    namespace = await createNamespace(`sc-proxy-${forwarder}`);
    upstream = await startEchoUpstream();
    redis = newRedis();
    sidecar = await startTestSidecar(sidecarOptions(namespace), {
      env: { GW_FORWARDER: forwarder, GW_UPSTREAM_TIMEOUT_MS: '400', GW_MAX_REQUEST_BODY_BYTES: '4096' },
      logger: collectingLogger(logs),
    });
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
    redis?.disconnect();
  });

  async function deploy(overrides: Partial<CompiledApi> = {}, target?: string): Promise<CompiledApi> {
    const api = compiledApi(uniqueId('api'), target ?? upstream.url, overrides);
    await deployApi(sidecar, namespace, api);
    return api;
  }

  /** gw_gateway_errors_total of one API and code, read from the sidecar's /metrics. */
  const gatewayErrorCount = async (api: string, code: string): Promise<number> => {
    const line = (await call(`${sidecar.healthUrl}/metrics`)).text.split('\n')
      .find((l) => l.startsWith(`gw_gateway_errors_total{api="${api}",code="${code}"}`));
    return Number(line?.split(' ').pop() ?? 0);
  };

  const url = (api: CompiledApi, path = '/'): string => `${sidecar.proxyUrl}${api.listen_path.replace(/\/$/, '')}${path}`;

  it('forwards a keyless request with path, query and X-Forwarded-*, without hop-by-hop headers', async () => {
    const api = await deploy();
    const res = await call(url(api, '/hello/world?x=1'), {
      headers: { connection: 'keep-alive, x-hop', 'x-hop': 'secret', 'x-kept': 'yes', host: 'gw.example:8080' },
    });
    expect(res.status).toBe(200);
    const echoed = res.json() as { path: string; query: string; headers: Record<string, string> };
    expect(echoed.path).toBe('/hello/world');
    expect(echoed.query).toBe('?x=1');
    expect(echoed.headers['x-kept']).toBe('yes');
    expect(echoed.headers['x-hop']).toBeUndefined();
    expect(echoed.headers['x-forwarded-for']).toBe('127.0.0.1');
    expect(echoed.headers['x-forwarded-proto']).toBe('http');
    expect(echoed.headers['x-forwarded-host']).toBe('gw.example:8080');
    expect(echoed.headers.host).toBe(new URL(upstream.url).host);
  });

  it('serves a request offering an upgrade other than WebSocket (curl --http2\'s h2c) as HTTP/1.1, the offer not passed on', async () => {
    const api = await deploy();
    const res = await call(url(api, '/h2c'), {
      headers: { connection: 'Upgrade, HTTP2-Settings', upgrade: 'h2c', 'http2-settings': 'AAMAAABkAAQCAAAAAAIAAAAA' },
    });
    expect(res.status).toBe(200);
    const echoed = res.json() as { path: string; headers: Record<string, string> };
    expect(echoed.path).toBe('/h2c');
    expect([echoed.headers.upgrade, echoed.headers['http2-settings']]).toEqual([undefined, undefined]);
    expect(res.headers.upgrade).toBeUndefined();
  });

  it('gives each request an id, on the answer and to the upstream; keeps a client\'s acceptable one', async () => {
    const api = await deploy();
    const fresh = await call(url(api, '/id'));
    const id = fresh.headers['x-request-id'] as string;
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect((fresh.json() as { headers: Record<string, string> }).headers['x-request-id']).toBe(id);
    expect((await call(url(api, '/id'))).headers['x-request-id']).not.toBe(id);
    const given = await call(url(api, '/id'), { headers: { 'x-request-id': 'trace-42.a:b' } });
    expect(given.headers['x-request-id']).toBe('trace-42.a:b');
    expect((given.json() as { headers: Record<string, string> }).headers['x-request-id']).toBe('trace-42.a:b');
    for (const unacceptable of ['has space', 'x'.repeat(129), 'semi;colon']) {
      const replaced = await call(url(api, '/id'), { headers: { 'x-request-id': unacceptable } });
      expect(replaced.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    }
    // The gateway's id replaces one the upstream answers with: the answer names the request the logs name.
    const own = await call(url(api, '/id?request_id=1'), { headers: { 'x-request-id': 'trace-43' } });
    expect(own.headers['x-request-id']).toBe('trace-43');
    // The gateway's own answers carry it too.
    expect((await call(`${sidecar.proxyUrl}/${uniqueId('nothing')}/`)).headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('keeps the listen path when strip_listen_path is false and prefixes the target path', async () => {
    const api = await deploy({ strip_listen_path: false }, `${upstream.url}/base/`);
    const res = await call(url(api, '/x'));
    expect((res.json() as { path: string }).path).toBe(`/base${api.listen_path}x`);
  });

  it("sends the target URL's query before the client's", async () => {
    const api = await deploy({}, `${upstream.url}/base?api-version=2024-01-01`);
    expect((await call(url(api, '/items?page=2'))).json()).toMatchObject({ path: '/base/items', query: '?api-version=2024-01-01&page=2' });
    expect((await call(url(api, '/items'))).json()).toMatchObject({ path: '/base/items', query: '?api-version=2024-01-01' });
  });

  it('routes by the longest listen path', async () => {
    const outer = await deploy({ listen_path: `/${uniqueId('lp')}/` });
    const inner = await deploy({ listen_path: `${outer.listen_path}inner/` }, `${upstream.url}/inner-target`);
    const res = await call(url(inner, '/a'));
    expect((res.json() as { path: string }).path).toBe('/inner-target/a');
    const outerRes = await call(url(outer, '/innerx'));
    expect((outerRes.json() as { path: string }).path).toBe('/innerx');
  });

  it('answers 404 JSON for unknown paths and inactive APIs', async () => {
    const api = await deploy({ active: false });
    const inactive = await call(url(api, '/'));
    expect(inactive.status).toBe(404);
    expect(inactive.json()).toEqual({ error: 'This API is not active' });
    expect(inactive.headers['x-gw-error-code']).toBe('api_inactive');
    const unknown = await call(`${sidecar.proxyUrl}/${uniqueId('nothing')}/`);
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toEqual({ error: 'No API is listening on this path' });
    expect(unknown.headers['x-gw-error-code']).toBe('not_found');
  });

  it('401 without a key; 403 for unknown, inactive, expired and ungranted keys; 200 for a good key', async () => {
    const api = await deploy({ keyless: false, auth_header_name: 'X-Api-Key' });
    const other = uniqueId('other');
    const grant = { [api.api_id]: { api_id: api.api_id } };
    const good = await storeSession(redis, { access_rights: grant });
    const inactive = await storeSession(redis, { access_rights: grant, is_inactive: true });
    const expired = await storeSession(redis, { access_rights: grant, expires: Math.floor(Date.now() / 1000) - 60 });
    const ungranted = await storeSession(redis, { access_rights: { [other]: { api_id: other } } });

    const missing = await call(url(api, '/'));
    expect(missing.status).toBe(401);
    expect(missing.json()).toEqual({ error: 'Authorization field missing' });
    for (const key of ['no-such-key', inactive, expired, ungranted]) {
      const denied = await call(url(api, '/'), { headers: { 'x-api-key': key } });
      expect(denied.status).toBe(403);
      expect(denied.json()).toEqual({ error: 'Access to this API has been disallowed' });
    }
    expect((await call(url(api, '/'), { headers: { 'x-api-key': good } })).status).toBe(200);
    expect((await call(url(api, '/'), { headers: { 'x-api-key': `Bearer ${good}` } })).status).toBe(200);
  });

  it('grants access through an applied policy of the key namespace', async () => {
    const api = compiledApi(uniqueId('api'), upstream.url, { keyless: false });
    const gold = policy('gold', { access_rights: { [api.api_id]: { api_id: api.api_id, api_name: api.name, limit: null, endpoints: [] } } }, 'team');
    await deployApi(sidecar, namespace, api, {}, [gold]);
    const member = await storeSession(redis, { apply_policies: ['gold'], namespace: 'team' });
    const stranger = await storeSession(redis, { apply_policies: ['gold'], namespace: 'elsewhere' });
    expect((await call(url(api, '/'), { headers: { authorization: member } })).status).toBe(200);
    expect((await call(url(api, '/'), { headers: { authorization: stranger } })).status).toBe(403);
  });

  it('ignored endpoints skip authentication', async () => {
    const api = await deploy({ keyless: false, ignored: [{ path: '/public', pattern: '^/public$', method: 'GET' }] });
    expect((await call(url(api, '/public'))).status).toBe(200);
    expect((await call(url(api, '/public'), { method: 'POST' })).status).toBe(401);
    expect((await call(url(api, '/private'))).status).toBe(401);
    // Dot segments are resolved before matching: no way around auth through an ignored path.
    expect((await call(url(api, '/public/../private'))).status).toBe(401);
    expect((await call(url(api, '/public/%2E%2E/private'))).status).toBe(401);
    // An escaped unreserved character is the character itself: `%70ublic` is the ignored `/public`.
    expect((await call(url(api, '/%70ublic'))).status).toBe(200);
  });

  it('refuses a dot segment with parameters, which would pass an ignored path and reach another on servers that drop them', async () => {
    const api = await deploy({ keyless: false, ignored: [{ path: '/public/.*', pattern: '^/public/.*$', method: 'GET' }] });
    expect((await call(url(api, '/public/docs'))).status).toBe(200);
    for (const path of ['/public/..;/private', '/public/%2e%2e;x/private', '/public/.;/x']) {
      const refused = await call(url(api, path));
      expect([refused.status, refused.headers['x-gw-error-code'], refused.text], path).toEqual([400, 'bad_path', JSON.stringify({ error: 'The path has a dot segment with parameters (such as ..;), which servers resolve differently' })]);
    }
    // Parameters elsewhere are the upstream's business.
    expect((await call(url(api, '/public/docs;v=1'))).json()).toMatchObject({ path: '/public/docs;v=1' });
  });

  it('counts an endpoint limit for a path with escaped unreserved characters, and forwards the path as resolved', async () => {
    const api = await deploy({ endpoint_limits: [{ path: '/items/special', pattern: '^/items/special$', method: 'GET', rate: 1, per: 60 }] });
    const first = await call(url(api, '/items/%73pecial'));
    expect(first.status).toBe(200);
    expect(first.json()).toMatchObject({ path: '/items/special' });
    expect((await call(url(api, '/items/sp%65cial'))).status).toBe(429);
  });

  it('429 API Rate Limit Exceeded past the API-level limit', async () => {
    const api = await deploy({ api_limit: { rate: 2, per: 60 } });
    expect((await call(url(api))).status).toBe(200);
    expect((await call(url(api))).status).toBe(200);
    const limited = await call(url(api));
    expect(limited.status).toBe(429);
    expect(limited.json()).toEqual({ error: 'API Rate Limit Exceeded' });
    expect(limited.headers['x-gw-error-code']).toBe('api_rate_limited');
    expect(await gatewayErrorCount(api.api_id, 'api_rate_limited')).toBe(1);
  });

  it('429 Rate Limit Exceeded past the key-level limit', async () => {
    const api = await deploy({ keyless: false });
    const key = await storeSession(redis, { rate: 2, per: 60, allowance: 2, access_rights: { [api.api_id]: { api_id: api.api_id } } });
    const headers = { authorization: key };
    expect((await call(url(api), { headers })).status).toBe(200);
    expect((await call(url(api), { headers })).status).toBe(200);
    const limited = await call(url(api), { headers });
    expect(limited.status).toBe(429);
    expect(limited.json()).toEqual({ error: 'Rate Limit Exceeded' });
  });

  it('403 Quota exceeded with quota X-RateLimit-* headers (the default `quotas`), replacing the upstream ones', async () => {
    const api = await deploy({ keyless: false });
    const key = await storeSession(redis, {
      quota_max: 2,
      quota_remaining: 2,
      quota_renewal_rate: 3600,
      access_rights: { [api.api_id]: { api_id: api.api_id } },
    });
    const headers = { authorization: key };
    const first = await call(url(api, '/?ratelimit=1'), { headers });
    expect(first.status).toBe(200);
    expect(first.headers['x-ratelimit-limit']).toBe('2');
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    expect(Number(first.headers['x-ratelimit-reset'])).toBeGreaterThan(Date.now() / 1000);
    const second = await call(url(api, '/?ratelimit=1'), { headers });
    expect(second.headers['x-ratelimit-remaining']).toBe('0');
    const refused = await call(url(api), { headers });
    expect(refused.status).toBe(403);
    expect(refused.json()).toEqual({ error: 'Quota exceeded' });
  });

  // The fields' largest values (2^53 - 1) once made the store's expiry wrap to a negative one,
  // which deleted the quota at every request (crds/quota-times.ts). A period counts as a
  // thousand years at most, and a renewal time as the end of year 9999 at the latest.
  it.each([
    ['its renewal time given as far ahead: the period ends at the end of year 9999', { quota_renews: Number.MAX_SAFE_INTEGER }, () => LATEST_QUOTA_RENEWAL_SECONDS],
    ['its first period starting now: it ends a thousand years from now', {}, (sentAt: number) => sentAt + LONGEST_QUOTA_PERIOD_SECONDS],
  ])('a quota period as long as the field takes still counts the quota, %s', async (_name, renews, resetAt) => {
    const api = await deploy({ keyless: false });
    const key = await storeSession(redis, {
      quota_max: 2,
      quota_remaining: 2,
      quota_renewal_rate: Number.MAX_SAFE_INTEGER,
      ...renews,
      access_rights: { [api.api_id]: { api_id: api.api_id } },
    });
    const headers = { authorization: key };
    const sentAt = Math.floor(Date.now() / 1000);
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await call(url(api), { headers }));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 403]);
    expect(Number(answers[0]!.headers['x-ratelimit-reset'])).toBeOneOf([resetAt(sentAt), resetAt(sentAt + 1)]);
  });

  it('under `quotas`, a quota that never renews resets at 0, and a 429 carries no quota figures: the quota was not reached', async () => {
    const api = await deploy({ keyless: false });
    const key = await storeSession(redis, {
      rate: 1,
      per: 3600,
      quota_max: 5,
      quota_remaining: 5,
      quota_renewal_rate: 0,
      access_rights: { [api.api_id]: { api_id: api.api_id } },
    });
    const headers = { authorization: key };
    const admitted = await call(url(api), { headers });
    expect(admitted.status).toBe(200);
    expect([admitted.headers['x-ratelimit-limit'], admitted.headers['x-ratelimit-remaining'], admitted.headers['x-ratelimit-reset']]).toEqual(['5', '4', '0']);
    const limited = await call(url(api), { headers });
    expect(limited.status).toBe(429);
    expect(Object.keys(limited.headers).filter((name) => name.startsWith('x-ratelimit-'))).toEqual([]);
  });

  it('passes upstream X-RateLimit-* through when no quota applies under `quotas`', async () => {
    const api = await deploy({ api_limit: { rate: 100, per: 60 } });
    const res = await call(url(api, '/?ratelimit=1'));
    expect(res.headers['x-ratelimit-limit']).toBe('999');
  });

  it('502 when the upstream cannot be reached', async () => {
    const closed = await startEchoUpstream();
    await closed.close();
    const api = await deploy({}, closed.url);
    const res = await call(url(api));
    expect(res.status).toBe(502);
    expect(res.json()).toEqual({ error: 'Upstream unreachable' });
    expect(res.headers['x-gw-error-code']).toBe('upstream_unreachable');
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(await gatewayErrorCount(api.api_id, 'upstream_unreachable')).toBe(1);
    expect(upstreamFailures(String(res.headers['x-request-id']))).toMatchObject([{ level: 40, api: api.api_id, upstream: closed.url, status: 502, code: 'upstream_unreachable', cause: 'ECONNREFUSED' }]);
  });

  it('a client that leaves mid-body after the 502 of an unreachable upstream is let go, and the gateway serves on', async () => {
    const closed = await startEchoUpstream();
    await closed.close();
    const api = await deploy({}, closed.url);
    const { port } = new URL(sidecar.proxyUrl);
    const path = `${api.listen_path}upload`;
    for (let i = 0; i < 3; i++) {
      const socket = connect(Number(port), '127.0.0.1');
      socket.write(`POST ${path} HTTP/1.1\r\nHost: a\r\nContent-Length: 30\r\n\r\nabc`);
      // The answer comes before the rest of the body, which this client never sends: it leaves.
      const head = await new Promise<string>((resolve, reject) => {
        socket.once('data', (chunk: Buffer) => resolve(chunk.toString()));
        socket.once('error', reject);
      });
      expect(head).toMatch(/^HTTP\/1\.1 502 /);
      expect(head).toContain('x-gw-error-code: upstream_unreachable');
      socket.destroy();
    }
    await eventually(async () => (await gatewayErrorCount(api.api_id, 'upstream_unreachable')) === 3);
    const served = await call(url(await deploy()));
    expect(served.status).toBe(200);
  });

  it('504 when the upstream answers later than upstream_timeout_ms', async () => {
    const api = await deploy();
    const res = await call(url(api, '/?delay_ms=3000'));
    expect(res.status).toBe(504);
    expect(res.json()).toEqual({ error: 'Upstream timed out' });
    expect(res.headers['x-gw-error-code']).toBe('upstream_timeout');
    expect(await gatewayErrorCount(api.api_id, 'upstream_timeout')).toBe(1);
    const [timedOut] = upstreamFailures(String(res.headers['x-request-id']));
    expect(timedOut).toMatchObject({ level: 40, status: 504, code: 'upstream_timeout' });
    // undici's own timeout, or the gateway's deadline with http-proxy.
    expect(timedOut?.cause).toBe(forwarder === 'undici' ? 'UND_ERR_HEADERS_TIMEOUT' : 'upstream_timeout');
  });

  it('answers unparsable requests and oversized headers in the JSON error shape', async () => {
    const raw = async (bytes: string): Promise<string> => {
      const { port } = new URL(sidecar.proxyUrl);
      const socket = connect(Number(port), '127.0.0.1');
      socket.end(bytes);
      const chunks: Buffer[] = [];
      for await (const chunk of socket) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString();
    };
    const garbage = await raw('NOT HTTP AT ALL\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
    expect(garbage).toContain('{"error":"Malformed HTTP request"}');
    const huge = await raw(`GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(huge).toMatch(/^HTTP\/1\.1 431 /);
    expect(huge).toContain('x-gw-error-code: headers_too_large');
    expect(huge).toContain('{"error":"Request header fields too large"}');
  });

  it('413 for a body over max_request_body_bytes, declared or chunked; bodies under it stream through', async () => {
    const api = await deploy();
    const big = 'x'.repeat(5000);
    const declared = await call(url(api), { method: 'POST', body: big });
    expect(declared.status).toBe(413);
    expect(declared.json()).toEqual({ error: 'Request body too large' });
    const chunked = await call(url(api), { method: 'POST', body: big, chunked: 1000 });
    expect(chunked.status).toBe(413);
    // The whole chunked body in the packet of its headers: the limit is passed before the
    // forwarder is handed the body, which must still answer 413, not wait for the upstream.
    const { port, pathname } = new URL(url(api));
    const socket = connect(Number(port), '127.0.0.1');
    socket.write(`POST ${pathname} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n${(5000).toString(16)}\r\n${big}\r\n0\r\n\r\n`);
    const answer: Buffer[] = [];
    for await (const chunk of socket) answer.push(chunk as Buffer);
    expect(Buffer.concat(answer).toString()).toMatch(/^HTTP\/1\.1 413 /);
    const small = await call(url(api), { method: 'POST', body: 'y'.repeat(3000), chunked: 1000 });
    expect(small.status).toBe(200);
    expect((small.json() as { body: string }).body).toBe('y'.repeat(3000));
  });

  it('cuts an answer whose upstream stops sending mid-body for longer than upstream_timeout_ms', async () => {
    const stalling = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': '1000' });
      res.write(Buffer.alloc(100, 7));
    });
    await new Promise<void>((resolve) => stalling.listen(0, '127.0.0.1', resolve));
    try {
      const api = await deploy({}, `http://127.0.0.1:${(stalling.address() as AddressInfo).port}`);
      const started = Date.now();
      const outcome = await new Promise<string>((resolve) => {
        const request = httpRequest(url(api, '/stall'), { agent: false }, (res) => {
          let bytes = 0;
          res.on('data', (chunk: Buffer) => (bytes += chunk.length));
          res.on('end', () => resolve(`ended after ${bytes} bytes`));
          res.on('error', () => resolve(`cut after ${bytes} bytes`));
        });
        request.on('error', (err) => resolve(`request failed: ${err.message}`));
        request.end();
      });
      expect(outcome).toBe('cut after 100 bytes');
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      stalling.closeAllConnections();
      await new Promise((resolve) => stalling.close(resolve));
    }
  });

  it('streams a large answer to a client that reads slowly whole; a client leaving mid-answer ends the upstream\'s answer', async () => {
    // 64 MiB in 64 KiB writes, each after the last drained: the sidecar must hold the upstream
    // back while the client does not read (far more than the sockets' buffers hold), and pass
    // every byte once it does.
    const piece = Buffer.alloc(64 * 1024, 7);
    const pieces = 1024;
    const upstreamEnds: string[] = [];
    let upstreamWritten = 0;
    const streaming = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(piece.length * pieces) });
      let written = 0;
      const more = (): void => {
        while (written < pieces) {
          written += 1;
          upstreamWritten = written;
          if (!res.write(piece)) return void res.once('drain', more);
        }
        res.end();
      };
      res.on('close', () => upstreamEnds.push(res.writableFinished ? 'finished' : `cut after ${written} pieces`));
      more();
    });
    await new Promise<void>((resolve) => streaming.listen(0, '127.0.0.1', resolve));
    try {
      const api = await deploy({}, `http://127.0.0.1:${(streaming.address() as AddressInfo).port}`);
      let writtenWhileClientWaited = 0;
      const slow = await new Promise<{ status: number; bytes: number; sevens: boolean }>((resolve, reject) => {
        const request = httpRequest(url(api, '/big'), { agent: false }, (res) => {
          res.pause();
          let bytes = 0;
          let sevens = true;
          setTimeout(() => {
            writtenWhileClientWaited = upstreamWritten;
            res.on('data', (chunk: Buffer) => {
              bytes += chunk.length;
              if (chunk.some((b) => b !== 7)) sevens = false;
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, sevens }));
            res.on('error', reject);
            res.resume();
            // Longer than upstream_timeout_ms (400 ms): time the client holds the answer back is no upstream stall.
          }, 1000);
        });
        request.on('error', reject);
        request.end();
      });
      expect(slow).toEqual({ status: 200, bytes: piece.length * pieces, sevens: true });
      expect(writtenWhileClientWaited).toBeGreaterThan(0);
      expect(writtenWhileClientWaited).toBeLessThan(pieces / 2);
      await eventually(async () => upstreamEnds.length === 1, 5000, 'the upstream answer closed');
      expect(upstreamEnds).toEqual(['finished']);

      // A client that takes the first bytes and leaves: the upstream's answer is ended early.
      await new Promise<void>((resolve, reject) => {
        const request = httpRequest(url(api, '/big'), { agent: false }, (res) => {
          res.once('data', () => {
            request.destroy();
            resolve();
          });
        });
        request.on('error', (err) => (request.destroyed ? undefined : reject(err)));
        request.end();
      });
      await eventually(async () => upstreamEnds.length === 2, 5000, 'the upstream answer ended after the client left');
      expect(upstreamEnds[1]).toMatch(/^cut after \d+ pieces$/);
      // The sidecar serves on.
      expect((await call(url(await deploy()))).status).toBe(200);
    } finally {
      await new Promise((resolve) => streaming.close(resolve));
    }
  });
});
