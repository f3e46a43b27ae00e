import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { MAX_FILE_BYTES } from '../../../sidecar/resources/yaml-folder.ts';
import { testEnv } from '../../harness/index.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { call, eventually, sidecarOptions, startTestSidecar, uniqueId, withExpectation } from './helpers.ts';

/**
 * The admin listener's request bodies on a standalone sidecar (README.md#admin-operations): a
 * body is asked for (100 Continue) only once the request's headers passed, a client that leaves
 * mid-body is counted as such rather than as a failed save, and a key created with the most
 * metadata a body may hold is a Key file the folder still loads after a restart.
 */

const apiYaml = (upstream: string): string => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: toys }
spec:
  api_id: toys
  use_keyless: false
  proxy: { listen_path: /toys/, target_url: '${upstream}' }
`;

describe('admin request bodies on a standalone sidecar', () => {
  const adminSecret = 'admin-bodies-secret';
  const portalSecret = 'admin-bodies-portal';
  const logLines: string[] = [];
  let upstream: EchoUpstream;
  let redis: Redis;
  let dir: string;
  let sidecar: RunningSidecar;
  const start = () =>
    startTestSidecar(
      { ...sidecarOptions('default', testEnv().redisUrl), configDir: dir, instanceId: uniqueId('admin-bodies'), adminSecret, portalSecret },
      { logger: collectingLogger(logLines) },
    );

  beforeAll(async () => {
    upstream = await startEchoUpstream();
    redis = new Redis(testEnv().redisUrl);
    dir = await mkdtemp(join(tmpdir(), 'gw-admin-bodies-'));
    await writeFile(join(dir, 'api.yaml'), apiYaml(upstream.url));
    sidecar = await start();
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
    redis?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const createKeyHead = (secret: string, length: number): string =>
    `POST /admin/org/keys HTTP/1.1\r\nHost: x\r\nAdmin-Auth: ${secret}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;

  it('asks for a body (100 Continue) only once the headers passed, and answers a refused request without it', async () => {
    const files = await readdir(dir);
    const body = JSON.stringify({ access_rights: { toys: {} } });
    const wrongSecret = await withExpectation(sidecar.adminUrl, createKeyHead('not-the-secret', body.length), body);
    expect(wrongSecret.bodySent).toBe(false);
    expect(wrongSecret.text).toMatch(/^HTTP\/1\.1 403 /);
    expect(wrongSecret.text.toLowerCase()).toContain('x-gw-error-code: admin_key_invalid');
    // The client may still send the body it was never asked for: the connection closes after the answer.
    expect(wrongSecret.closed).toBe(true);
    const tooLong = await withExpectation(sidecar.adminUrl, createKeyHead(adminSecret, 2 * 1024 * 1024), body);
    expect(tooLong.bodySent).toBe(false);
    expect(tooLong.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(tooLong.closed).toBe(true);
    const tagHead = `POST /portal-api/products/p/tags HTTP/1.1\r\nHost: x\r\nAuthorization: wrong\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n`;
    const wrongPortalSecret = await withExpectation(sidecar.adminUrl, tagHead, '{"Name":"a"}');
    expect(wrongPortalSecret.bodySent).toBe(false);
    expect(wrongPortalSecret.text).toMatch(/^HTTP\/1\.1 401 /);
    expect(await readdir(dir)).toEqual(files);
    const admitted = await withExpectation(sidecar.adminUrl, createKeyHead(adminSecret, body.length), body);
    expect(admitted.bodySent).toBe(true);
    expect(admitted.text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
    expect((await readdir(dir)).length).toBe(files.length + 1);
  });

  it('logs refused credentials at warn, once a minute at most with their count, and never the key tried', async () => {
    const lines: string[] = [];
    const guarded = await startTestSidecar(
      { ...sidecarOptions('default', testEnv().redisUrl), configDir: dir, instanceId: uniqueId('admin-guessed'), adminSecret, portalSecret },
      { logger: collectingLogger(lines) },
    );
    try {
      const tries = ['guess-one', 'guess-two', 'guess-three', 'guess-four', 'guess-five'];
      for (const guess of tries) {
        expect((await call(`${guarded.adminUrl}/gw/reload`, { headers: { 'x-gw-authorization': guess } })).status).toBe(403);
      }
      expect((await call(`${guarded.adminUrl}/admin/org/keys`, { method: 'POST', headers: { 'admin-auth': 'guess-six', 'content-type': 'application/json' }, body: '{}' })).status).toBe(403);
      const refusedLines = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'admin credentials refused');
      expect(refusedLines).toEqual([expect.objectContaining({ level: 40, operation: 'reload', code: 'gateway_key_invalid', client: '127.0.0.1', refusedSinceLastLine: 1 })]);
      for (const guess of [...tries, 'guess-six']) expect(lines.filter((line) => line.includes(guess))).toEqual([]);
      const metrics = (await call(`${guarded.healthUrl}/metrics`)).text;
      expect(metrics).toContain('gw_admin_requests_total{operation="reload",code="gateway_key_invalid"} 5');
    } finally {
      await guarded.close();
    }
  });

  it('counts a client that leaves mid-body as client_closed, logs no error, and writes nothing', async () => {
    const files = await readdir(dir);
    const sessions = await redis.keys(sessionKey('*'));
    logLines.length = 0;
    const socket = connect(Number(new URL(sidecar.adminUrl).port), '127.0.0.1', () => socket.write(`${createKeyHead(adminSecret, 500).replace('Expect: 100-continue\r\n', '')}{"alias":`));
    socket.on('error', () => undefined);
    await new Promise((resolve) => setTimeout(resolve, 300));
    socket.destroy();
    const counted = async (): Promise<string> => (await sidecar.metrics.registry.getSingleMetricAsString('gw_admin_requests_total'));
    await eventually(async () => (await counted()).includes('gw_admin_requests_total{operation="create_key",code="client_closed"} 1'), 5_000, 'the abort counted');
    expect(await counted()).not.toContain('key_save_failed');
    expect(logLines.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.level >= 50)).toEqual([]);
    expect(await readdir(dir)).toEqual(files);
    expect(await redis.keys(sessionKey('*'))).toEqual(sessions);
  });

  it('writes a key with the most metadata a Key may hold as a Key file the folder loads again after a restart, and refuses more', async () => {
    // meta_data of 65,534 bytes of JSON, under its 64 KiB bound (crds/schemas/common.ts).
    const withMetaData = (entries: number): string => JSON.stringify({ access_rights: { toys: {} }, meta_data: { a: Array.from({ length: entries }, () => 0) } });
    const files = await readdir(dir);
    const over = await call(`${sidecar.adminUrl}/admin/org/keys`, { method: 'POST', headers: { 'admin-auth': adminSecret, 'content-type': 'application/json' }, body: withMetaData(32_766) });
    expect(over.status).toBe(400);
    expect((over.json() as { Message: string }).Message).toContain('meta_data: at most 65536 bytes as JSON');
    expect(await readdir(dir)).toEqual(files);
    const body = withMetaData(32_764);
    const created = await call(`${sidecar.adminUrl}/admin/org/keys`, { method: 'POST', headers: { 'admin-auth': adminSecret, 'content-type': 'application/json' }, body });
    expect(created.status).toBe(200);
    const { key_id: rawKey, key_hash: hash, data } = created.json() as { key_id: string; key_hash: string; data: { key_id: string } };
    expect((await stat(join(dir, `key-${data.key_id}.yaml`))).size).toBeLessThan(MAX_FILE_BYTES / 2);
    // A restart, with the session gone from Redis: only the Key file can bring the key back.
    await sidecar.close();
    await redis.del(sessionKey(hash));
    sidecar = await start();
    await eventually(async () => (await call(`${sidecar.proxyUrl}/toys/get`, { headers: { authorization: rawKey } })).status === 200, 10_000, 'the key served again');
    expect(sidecar.runtime.problems()).toEqual([]);
  });
});
