import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyHash } from '../../../crds/key-hash.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { startRedis, type RedisHandle } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';
import { call, eventually, spawnSidecar } from './helpers.ts';

function apiYaml(id: string, listenPath: string, target: string, keyless: boolean): string {
  return `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${id} }
spec: { api_id: ${id}, name: ${id}, use_keyless: ${keyless}, proxy: { listen_path: ${listenPath}, target_url: '${target}', strip_listen_path: true } }
`;
}

describe('gw-sidecar process (folder mode)', () => {
  let upstream: EchoUpstream;
  let redis: RedisHandle;
  let dir: string;
  const rawKey = randomBytes(16).toString('hex');

  beforeAll(async () => {
    upstream = await startEchoUpstream();
    redis = await startRedis();
    dir = await mkdtemp(join(tmpdir(), 'gw-process-'));
    await writeFile(
      join(dir, 'apis.yaml'),
      `${apiYaml('folder-auth', '/auth/', upstream.url, false)}---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: folder-key }
spec: { key_hash: ${keyHash(rawKey)}, access_rights: { folder-auth: { api_id: folder-auth, api_name: folder-auth } } }
`,
    );
  });

  afterAll(async () => {
    await upstream?.close();
    await redis?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('exits 1 at start naming an invalid setting', async () => {
    const child = spawnSidecar(['--config', dir, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--health-listen', '127.0.0.1:0'], { GW_DRL_THRESHOLD: 'many' });
    expect(await child.exited).toBe(1);
    expect(child.stderr()).toContain('invalid setting drl_threshold (from GW_DRL_THRESHOLD)');
    // Its log line says the same, without a stack trace to bury it.
    const fatal = child.stdout().split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.level === 60);
    expect(fatal?.msg).toContain('gw-sidecar cannot start: invalid setting drl_threshold (from GW_DRL_THRESHOLD)');
    expect(fatal).not.toHaveProperty('err');
  });

  it('exits 2 on options it refuses, with the reason last and not buried under the help text', async () => {
    const child = spawnSidecar([]);
    expect(await child.exited).toBe(2);
    expect(child.stderr()).toMatch(/^gw-sidecar: a gateway in a cluster \(no --config\) needs --redis-url \(GW_REDIS_URL\): .*sidecar\.namespaces\n\(gw-sidecar --help lists the flags and variables\)\n$/);
  });

  it('exits 1 at start naming the option whose address cannot be bound', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const port = (taken.address() as AddressInfo).port;
      const child = spawnSidecar(['--config', dir, '--listen', '127.0.0.1:0', '--admin-listen', `127.0.0.1:${port}`, '--health-listen', '127.0.0.1:0']);
      expect(await child.exited).toBe(1);
      expect(child.stderr()).toContain(`gw-sidecar: cannot start: --admin-listen (GW_ADMIN_LISTEN): listen EADDRINUSE: address already in use 127.0.0.1:${port}`);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });

  it('serves an API whose endpoint path backtracks exponentially without stopping, and refuses one with a backreference', async () => {
    const redosDir = await mkdtemp(join(tmpdir(), 'gw-redos-'));
    const withPath = (id: string, listenPath: string, path: string): string => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${id} }
spec:
  api_id: ${id}
  use_keyless: true
  proxy: { listen_path: ${listenPath}, target_url: '${upstream.url}', strip_listen_path: true }
  use_extended_paths: true
  extended_paths: { rate_limit: [{ path: '${path}', method: GET, rate: 100, per: 1 }] }
`;
    await writeFile(join(redosDir, 'apis.yaml'), `${withPath('nested', '/nested/', '/(a+)+$')}---\n${withPath('backref', '/backref/', '/(a+)\\1')}---\n${apiYaml('plain', '/plain/', upstream.url, true)}`);
    const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
    const child = spawnSidecar(['--config', redosDir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`, '--redis-url', redis.url], { GW_WORKERS: '1', GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' });
    try {
      const proxy = `http://127.0.0.1:${listen}`;
      await eventually(async () => (await call(`${proxy}/plain/x`).catch(() => ({ status: 0 }))).status === 200, 20_000, 'serving');
      // 2^60 steps for a backtracking match: the gateway would never answer again.
      const [nested, plain] = await Promise.all([call(`${proxy}/nested/${'a'.repeat(60)}!`), call(`${proxy}/plain/x`)]);
      expect(nested.status).toBe(200);
      expect(plain.status).toBe(200);
      // The rule still matches what it matches: its limit applies to a path of a's alone.
      expect(nested.headers['x-ratelimit-limit']).toBeUndefined();
      expect((await call(`${proxy}/nested/${'a'.repeat(60)}`)).headers['x-ratelimit-limit']).toBe('100');
      const ready = (await call(`http://127.0.0.1:${health}/readyz`)).json() as { problems: { subject: string; reason: string; file: string }[] };
      expect(ready.problems).toEqual([
        { subject: 'ApiDefinition default/backref', file: 'apis.yaml', reason: expect.stringMatching(/^spec\.extended_paths\.rate_limit\[0\]\.path: .*could take exponential time to match/) },
      ]);
      expect((await call(`${proxy}/backref/x`)).status).toBe(404);
    } finally {
      if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
      await rm(redosDir, { recursive: true, force: true });
    }
  });

  it('serves Keys of the folder, applies edits on its own, reloads on SIGHUP and GET /gw/reload, survives Redis going away, drains on SIGTERM', async () => {
    const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
    const child = spawnSidecar(['--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`, '--redis-url', redis.url], { GW_ADMIN_SECRET: 'process-admin-secret', GW_WORKERS: '1' });
    try {
      const proxy = `http://127.0.0.1:${listen}`;
      await eventually(async () => (await call(`http://127.0.0.1:${health}/readyz`).catch(() => ({ status: 0 }))).status === 200, 20_000, 'ready');
      expect((await call(`${proxy}/auth/x`, { headers: { authorization: rawKey } })).status).toBe(200);
      expect((await call(`${proxy}/auth/x`, { headers: { authorization: 'wrong' } })).status).toBe(403);

      const loadsOk = async (): Promise<number> =>
        Number(/gw_config_reloads_total\{source="folder",result="ok"\} (\d+)/.exec((await call(`http://127.0.0.1:${health}/metrics`)).text)?.[1] ?? 0);
      await writeFile(join(dir, 'more.yaml'), apiYaml('folder-open', '/open/', upstream.url, true));
      await eventually(async () => (await call(`${proxy}/open/x`)).status === 200, 10_000, 'applied by the folder watch');
      const loadsBeforeHup = await loadsOk();
      child.proc.kill('SIGHUP');
      await eventually(async () => (await loadsOk()) === loadsBeforeHup + 1, 10_000, 'reloaded on SIGHUP');

      await redis.stop();
      const during = await call(`${proxy}/open/x`);
      expect(during.status).toBe(200);
      // Failing open (the default) it serves on, so it stays ready and lists Redis as a problem.
      const readyz = async (): Promise<{ status: number; subjects: string[] }> => {
        const res = await call(`http://127.0.0.1:${health}/readyz`);
        return { status: res.status, subjects: (res.json() as { problems: { subject: string }[] }).problems.map((p) => p.subject) };
      };
      await eventually(async () => (await readyz()).subjects.includes('Redis'), 10_000, 'Redis reported');
      expect((await readyz()).status).toBe(200);
      await redis.start();
      await eventually(async () => !(await readyz()).subjects.includes('Redis'), 20_000, 'Redis back');
      expect((await readyz()).status).toBe(200);
      // Redis came back empty (no persistence): the folder's Keys are checked again and their sessions written.
      await eventually(async () => (await loadsOk()) === loadsBeforeHup + 2, 10_000, 'the Keys checked once Redis is back');
      expect((await call(`${proxy}/auth/x`, { headers: { authorization: rawKey } })).status).toBe(200);

      for (let i = 0; i < 8; i++) expect((await call(`${proxy}/open/x`)).status).toBe(200);
      const metrics = await call(`http://127.0.0.1:${health}/metrics`);
      expect(metrics.text).toMatch(/gw_requests_total\{api="folder-auth",code_class="2xx"\} 2/);
      expect(metrics.text).toContain('gw_upstream_duration_seconds_bucket');
      // One request in 8 that the gateway admitted or refused is timed on average, from 4 to 12 requests apart.
      const sumOf = (name: string): number => [...metrics.text.matchAll(new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, 'gm'))].reduce((sum, m) => sum + Number(m[1]), 0);
      const timed = sumOf('gw_admission_duration_seconds_count');
      expect(timed).toBeGreaterThanOrEqual(1);
      expect(timed * 4).toBeLessThanOrEqual(sumOf('gw_requests_total'));
      expect(metrics.text).toContain(`gw_config_reloads_total{source="folder",result="ok"} ${loadsBeforeHup + 2}`);

      const adminAuth = { 'x-gw-authorization': 'process-admin-secret' };
      const deleted = await call(`http://127.0.0.1:${admin}/gw/apis/folder-open`, { method: 'DELETE', headers: adminAuth });
      expect(deleted.json()).toEqual({ key: 'folder-open', status: 'ok', action: 'deleted' });
      expect((await call(`${proxy}/open/x`)).status).toBe(200);
      expect((await call(`http://127.0.0.1:${admin}/gw/reload`, { headers: adminAuth })).status).toBe(200);
      expect((await call(`${proxy}/open/x`)).status).toBe(404);

      const slow = call(`${proxy}/auth/x?delay_ms=500`, { headers: { authorization: rawKey } });
      await new Promise((r) => setTimeout(r, 100));
      child.proc.kill('SIGTERM');
      expect((await slow).status).toBe(200);
      expect(await child.exited).toBe(0);
    } finally {
      if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
    }
  });
});
