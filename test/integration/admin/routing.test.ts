import type { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../common/logger.ts';
import { createNamespace } from '../../harness/index.ts';
import { startAdmin, type AdminServer } from './admin-client.ts';
import { ADMIN_SECRET, clusterDeps, connected, testRedis } from './fixtures.ts';

describe('admin routing, shapes and metrics', () => {
  let redis: Redis;
  let admin: AdminServer;
  let namespace: string;
  const registry = new Registry();

  beforeAll(async () => {
    namespace = await createNamespace('admin-routes');
    redis = await connected(testRedis());
    await redis.flushdb();
    admin = await startAdmin({ ...clusterDeps(namespace, redis).deps, registry });
  });

  afterAll(async () => {
    await admin?.close();
    redis?.disconnect();
  });

  it.each([
    ['/admin/org/nothing', { Status: 'Error', Message: 'Not found', Meta: null }],
    ['/api/apis/oas/x/other', { Status: 'Error', Message: 'Not found', Meta: null }],
    ['/gw/apis/a/b', { status: 'error', message: 'Not found' }],
    ['/gw/apis/../../etc/passwd', { status: 'error', message: 'Not found' }],
    ['/portal-api/products/p/labels', { errors: ['Not found'] }],
    ['/', { Status: 'Error', Message: 'Not found', Meta: null }],
  ])('answers 404 for %s in the shape of its area', async (path, body) => {
    const res = await admin.call('GET', path, { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
    expect(res.status).toBe(404);
    expect(res.json).toEqual(body);
    expect(res.headers['x-gw-error-code']).toBe('route_not_found');
  });

  it.each([
    ['GET', '/admin/org/keys', 'POST', { Status: 'Error', Message: 'Method not allowed', Meta: null }],
    ['POST', '/gw/apis/x', 'DELETE', { status: 'error', message: 'Method not allowed' }],
    ['DELETE', '/portal-api/products/p/tags', 'POST', { errors: ['Method not allowed'] }],
    ['POST', '/gw/reload', 'GET', { status: 'error', message: 'Method not allowed' }],
    // HEAD is a safe method: it must not reload what the GET reloads.
    ['HEAD', '/gw/reload', 'GET', undefined],
    ['POST', '/gw/gateways', 'GET, HEAD', { status: 'error', message: 'Method not allowed' }],
  ])('answers 405 to %s %s with Allow', async (method, path, allow, body) => {
    const res = await admin.call(method, path);
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe(allow);
    expect(res.json).toEqual(body);
  });

  it('answers HEAD on a GET route as the GET, headers and status without the body', async () => {
    const own = new Registry();
    const headAdmin = await startAdmin({ ...clusterDeps(namespace, redis).deps, registry: own });
    try {
      const get = await headAdmin.call('GET', '/gw/gateways', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
      const head = await headAdmin.call('HEAD', '/gw/gateways', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
      expect(head.status).toBe(200);
      expect(head.text).toBe('');
      expect(head.headers['content-type']).toBe('application/json');
      expect(head.headers['content-length']).toBe(get.headers['content-length']);
      const refused = await headAdmin.call('HEAD', '/gw/gateways', { headers: [['X-GW-Authorization', 'wrong']] });
      expect(refused.status).toBe(403);
      expect(refused.text).toBe('');
      expect(refused.headers['x-gw-error-code']).toBe('gateway_key_invalid');
      const text = await own.metrics();
      expect(text).toContain('gw_admin_requests_total{operation="live_gateways",code="ok"} 2');
      expect(text).toContain('gw_admin_requests_total{operation="live_gateways",code="gateway_key_invalid"} 1');
    } finally {
      await headAdmin.close();
    }
  });

  it('answers every request with its X-Request-Id (the client\'s when acceptable) and logs under it', async () => {
    const lines: string[] = [];
    const logged = await startAdmin({ ...clusterDeps(namespace, redis).deps, logger: createLogger('admin-test', 'debug', { write: (line: string) => lines.push(line) }) });
    try {
      const ok = await logged.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', ADMIN_SECRET], ['X-Request-Id', 'trace-42']] });
      expect(ok.status).toBe(200);
      expect(ok.headers['x-request-id']).toBe('trace-42');
      const refused = await logged.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', 'wrong'], ['X-Request-Id', 'not one word']] });
      expect(refused.status).toBe(403);
      const fresh = refused.headers['x-request-id'];
      expect(fresh).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      const unrouted = await logged.call('GET', '/gw/nothing');
      expect(unrouted.status).toBe(404);
      expect(unrouted.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      expect(unrouted.headers['x-request-id']).not.toBe(fresh);
      const records = lines.map((line) => JSON.parse(line) as { reqId?: string; msg: string; code?: string });
      expect(records).toContainEqual(expect.objectContaining({ reqId: 'trace-42', msg: 'gateway reloaded' }));
      expect(records).toContainEqual(expect.objectContaining({ reqId: fresh, msg: 'admin request failed', code: 'gateway_key_invalid' }));
    } finally {
      await logged.close();
    }
  });

  it('counts requests by operation and outcome without credentials in labels', async () => {
    await admin.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
    await admin.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', 'wrong']] });
    const text = await registry.metrics();
    expect(text).toContain('gw_admin_requests_total{operation="reload",code="ok"} 1');
    expect(text).toContain('gw_admin_requests_total{operation="reload",code="gateway_key_invalid"} 1');
    expect(text).not.toContain(ADMIN_SECRET);
  });

  it('answers 413 to an oversized chunked body (no Content-Length) and stores nothing', async () => {
    const { request } = await import('node:http');
    const url = new URL(admin.url);
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        { host: url.hostname, port: url.port, method: 'POST', path: '/admin/org/keys', headers: { 'admin-auth': ADMIN_SECRET, 'content-type': 'application/json' } },
        (response) => {
          let body = '';
          response.on('data', (chunk: Buffer) => (body += chunk.toString()));
          response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.write('{"alias":"');
      for (let i = 0; i < 20; i++) req.write('x'.repeat(100 * 1024));
      req.end('"}');
    });
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toEqual({ Status: 'Error', Message: 'Request body too large: at most 1048576 bytes', Meta: null });
    expect(await redis.dbsize()).toBe(0);
  });

  it('keeps serving after a client hangs up mid-body', async () => {
    const { request } = await import('node:http');
    const url = new URL(admin.url);
    await new Promise<void>((resolve) => {
      const req = request({ host: url.hostname, port: url.port, method: 'POST', path: '/admin/org/keys', headers: { 'admin-auth': ADMIN_SECRET, 'content-length': '1000' } });
      req.on('error', () => resolve());
      req.write('{"alias":');
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 100);
    });
    const res = await admin.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
    expect(res.status).toBe(200);
  });
});
