import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { keyHash } from '../../../crds/key-hash.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gatewayHeartbeatKey } from '../../../common/redis-keys.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { startRedis, type RedisHandle } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';
import { isAlive } from '../../harness/procs.ts';
import { call, eventually, spawnSidecar, type CallResult, type SidecarChild } from './helpers.ts';

const ADMIN = { 'x-gw-authorization': 'workers-admin-secret' };

function apiYaml(id: string, limit: string): string {
  return `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${id} }
spec: { api_id: ${id}, name: ${id}, use_keyless: true, ${limit} proxy: { listen_path: /${id}/, target_url: '{{upstream}}', strip_listen_path: true } }
`;
}

interface Gateway {
  child: SidecarChild;
  proxy: string;
  admin: string;
  health: string;
}

/** The gateway on free ports, started. */
async function spawnGateway(dir: string, redisUrl: string | undefined, workers: string, env: NodeJS.ProcessEnv = {}): Promise<Gateway & { proxyPort: number }> {
  const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
  const args = ['--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`, '--workers', workers];
  if (redisUrl !== undefined) args.push('--redis-url', redisUrl);
  const child = spawnSidecar(args, { GW_ADMIN_SECRET: 'workers-admin-secret', GW_INSTANCE_ID: 'workers-test', ...env });
  return { child, proxyPort: listen, proxy: `http://127.0.0.1:${listen}`, admin: `http://127.0.0.1:${admin}`, health: `http://127.0.0.1:${health}` };
}

/** The gateway, once its /readyz answers 200. */
async function startGateway(dir: string, redisUrl: string | undefined, workers: string, env: NodeJS.ProcessEnv = {}): Promise<Gateway & { proxyPort: number }> {
  const gateway = await spawnGateway(dir, redisUrl, workers, env);
  const { child } = gateway;
  await eventually(async () => (await call(`${gateway.health}/readyz`).catch(() => ({ status: 0 }))).status === 200 || child.proc.exitCode !== null, 30_000, 'ready');
  expect(child.proc.exitCode, child.stderr()).toBeNull();
  return gateway;
}

/** Whether a TCP connection to the port is accepted, or the error code it meets. */
function connectOutcome(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
}

/** Every request on a new connection, so node:cluster hands them to the workers in turn. */
async function statuses(url: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await call(url)).status);
  return out;
}

const sumOf = (metrics: string, name: string): number =>
  [...metrics.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)$`, 'gm'))].reduce((sum, m) => sum + Number(m[1]), 0);

describe('gw-sidecar --workers (folder mode, Redis)', () => {
  let upstream: EchoUpstream;
  let redis: RedisHandle;
  let client: Redis;
  let dir: string;
  const rawKey = randomBytes(16).toString('hex');

  beforeAll(async () => {
    upstream = await startEchoUpstream();
    redis = await startRedis();
    client = new Redis(redis.url);
    dir = await mkdtemp(join(tmpdir(), 'gw-workers-'));
    const smoothedKey = `apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: smoothed-key }
spec:
  key_hash: ${keyHash(rawKey)}
  rate: 20
  per: 3600
  smoothing: { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 0 }
  access_rights: { auth: { api_id: auth, api_name: auth } }
`;
    const guarded = apiYaml('guarded', "rate_limit_resources: [{ label: guard, local: { count: 10, interval: '1h' } }],").replace('strip_listen_path: true', 'strip_listen_path: true, rate_limit: guard');
    const stalled = apiYaml('stalled', "rate_limit_resources: [{ label: guard, local: { count: 4, interval: '1h' } }],").replace('strip_listen_path: true', 'strip_listen_path: true, rate_limit: guard');
    const yaml = [apiYaml('open', ''), apiYaml('kept', ''), apiYaml('limited', 'global_rate_limit: { rate: 20, per: 3600 },'), apiYaml('auth', ''), guarded, stalled, smoothedKey]
      .join('---\n')
      .replace('{ api_id: auth, name: auth, use_keyless: true,', '{ api_id: auth, name: auth, use_keyless: false,');
    await writeFile(join(dir, 'apis.yaml'), yaml.replaceAll('{{upstream}}', upstream.url));
  });

  afterAll(async () => {
    client?.disconnect();
    await upstream?.close();
    await redis?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /**
   * Two workers warming up for their full 10 s (more requests than the bound lets a warm-up
   * send), once the primary's /readyz answers, with its first answer.
   */
  async function warmingGateway(instanceId: string): Promise<Gateway & { proxyPort: number; firstReadyz: CallResult }> {
    const gateway = await spawnGateway(dir, redis.url, '2', { GW_INSTANCE_ID: instanceId, GW_WARM_UP_REQUESTS: '1000000' });
    let firstReadyz: CallResult | undefined;
    await eventually(async () => (firstReadyz = await call(`${gateway.health}/readyz`).catch(() => undefined)) !== undefined, 10_000, '/readyz served');
    return { ...gateway, firstReadyz: firstReadyz! };
  }

  it('refuses more than one worker without Redis, and a bad setting before forking any', async () => {
    const noRedis = spawnSidecar(['--config', dir, '--workers', '2']);
    expect(await noRedis.exited).toBe(2);
    expect(noRedis.stderr()).toContain('--workers (GW_WORKERS) 2 needs --redis-url (GW_REDIS_URL)');
    const badSetting = spawnSidecar(['--config', dir, '--workers', '2', '--redis-url', redis.url, '--health-listen', '127.0.0.1:0'], { GW_DRL_THRESHOLD: 'many' });
    expect(await badSetting.exited).toBe(1);
    expect(badSetting.stderr()).toContain('invalid setting drl_threshold (from GW_DRL_THRESHOLD)');
    expect(badSetting.stderr()).not.toContain('worker');
  });

  it('serves on two workers that DRL counts as two gateways, with one /metrics and /readyz, one admin, reloads on all, restarts a killed worker that serves the deletes the other retains, stops on SIGTERM', async () => {
    const gw = await startGateway(dir, redis.url, '2');
    try {
      // Each worker joins the API's live gateways under its own instance id.
      await eventually(async () => (await client.zrange(gatewayHeartbeatKey('limited'), '0', '-1')).length === 2, 10_000, 'two heartbeats');
      expect((await client.zrange(gatewayHeartbeatKey('limited'), '0', '-1')).sort()).toEqual(['workers-test-w0', 'workers-test-w1']);

      // The API limit is 20 an hour: each worker holds a DRL share of 10, from its start (it
      // counts the other worker before either has read the other's heartbeat). The kernel spreads
      // new connections over the workers' sockets at random; of 100, each worker meets more than
      // 10 (all but certainly), so exactly 20 pass. One worker alone would pass 10; workers not
      // counted as gateways, 40, as both did until each one's second beat (2 s).
      const limited = await statuses(`${gw.proxy}/limited/x`, 100);
      expect(limited.filter((s) => s === 200)).toHaveLength(20);
      expect(limited.filter((s) => s === 429)).toHaveLength(80);

      expect(await statuses(`${gw.proxy}/open/x`, 10)).toEqual(Array(10).fill(200));
      const metrics = (await call(`${gw.health}/metrics`)).text;
      // The primary's /metrics sums the workers': every request is counted once.
      expect(sumOf(metrics, 'gw_requests_total')).toBe(110);
      expect(metrics).toMatch(/^gw_requests_total\{api="limited",code_class="4xx"\} 80$/m);
      expect(metrics).toMatch(/^gw_workers 2$/m);
      expect(metrics).toMatch(/^gw_config_reloads_total\{source="folder",result="ok"\} 2$/m);
      // Each worker tracks session changes on its own connection; the primary shows the least of them, not a sum.
      await eventually(async () => /^gw_session_changes_tracked 1$/m.test((await call(`${gw.health}/metrics`)).text), 10_000, 'session changes tracked');

      // SIGHUP to the primary reloads every worker.
      gw.child.proc.kill('SIGHUP');
      await eventually(async () => /^gw_config_reloads_total\{source="folder",result="ok"\} 4$/m.test((await call(`${gw.health}/metrics`)).text), 10_000, 'both reloaded');

      // A deleted API stays served by every worker until GET /gw/reload, then by none.
      const deleted = await call(`${gw.admin}/gw/apis/open`, { method: 'DELETE', headers: ADMIN });
      expect(deleted.json()).toEqual({ key: 'open', status: 'ok', action: 'deleted' });
      await new Promise((r) => setTimeout(r, 1000)); // the folder watch has re-read the folder in each worker
      expect(await statuses(`${gw.proxy}/open/x`, 6)).toEqual(Array(6).fill(200));

      // A killed worker: the other serves every request meanwhile, and the primary starts a new one.
      const ready = (await call(`${gw.health}/readyz`)).json();
      expect(ready).toEqual({ status: 'ready', reasons: [], problems: [] });
      const pids = await childPids(gw.child.proc.pid!);
      expect(pids).toHaveLength(2);
      const countedBefore = sumOf((await call(`${gw.health}/metrics`)).text, 'gw_requests_total');
      expect(countedBefore).toBe(116);
      // Killed while a scrape waits for its answer (stopped first, so that it cannot answer): the
      // scrape answers still, with what the last one read of it.
      process.kill(pids[1]!, 'SIGSTOP');
      const scrape = call(`${gw.health}/metrics`);
      await new Promise((r) => setTimeout(r, 200));
      process.kill(pids[1]!, 'SIGKILL');
      const scraped = await scrape;
      expect(scraped.status).toBe(200);
      expect(sumOf(scraped.text, 'gw_requests_total')).toBe(countedBefore);
      await eventually(async () => /^gw_worker_exits_total\{code="SIGKILL"\} 1$/m.test((await call(`${gw.health}/metrics`)).text), 10_000, 'exit counted');
      // The primary waits half a second before the new worker: meanwhile the other serves all.
      expect(await statuses(`${gw.proxy}/kept/x`, 6)).toEqual(Array(6).fill(200));
      // The pod stays ready throughout: the worker down, then starting again, is a problem, never a reason.
      const readyz: number[] = [];
      await eventually(async () => {
        const res = await call(`${gw.health}/readyz`);
        readyz.push(res.status);
        return (await childPids(gw.child.proc.pid!)).length === 2 && res.status === 200 && (res.json().problems as unknown[]).length === 0;
      }, 20_000, 'worker restarted and ready');
      expect(readyz.filter((status) => status !== 200)).toEqual([]);
      expect((await childPids(gw.child.proc.pid!)).filter((pid) => !pids.includes(pid))).toHaveLength(1);
      expect((await call(`${gw.health}/readyz`)).json()).toEqual({ status: 'ready', reasons: [], problems: [] });
      // The killed worker's counts stay in the sum (a drop would read as a counter reset): the 6 requests since are added.
      expect(sumOf((await call(`${gw.health}/metrics`)).text, 'gw_requests_total')).toBe(countedBefore + 6);
      // The new worker serves the deleted API too, as the other retains it (of 20 new connections
      // it meets some, all but certainly); GET /gw/reload then releases it on both.
      expect(await statuses(`${gw.proxy}/open/x`, 20)).toEqual(Array(20).fill(200));
      expect((await call(`${gw.admin}/gw/reload`, { headers: ADMIN })).status).toBe(200);
      expect(await statuses(`${gw.proxy}/open/x`, 6)).toEqual(Array(6).fill(404));

      const slow = call(`${gw.proxy}/kept/x?delay_ms=500`);
      await new Promise((r) => setTimeout(r, 100));
      gw.child.proc.kill('SIGTERM');
      expect((await slow).status).toBe(200);
      expect(await gw.child.exited).toBe(0);
      expect(await childPids(gw.child.proc.pid!)).toEqual([]);
    } finally {
      if (gw.child.proc.exitCode === null) gw.child.proc.kill('SIGKILL');
    }
  });

  it('refuses to start on a proxy port another gateway\'s workers hold, instead of sharing its traffic through SO_REUSEPORT', async () => {
    const first = await startGateway(dir, redis.url, '2');
    let second: SidecarChild | undefined;
    try {
      const [admin, health] = await Promise.all([freePort(), freePort()]);
      const args = ['--config', dir, '--listen', `127.0.0.1:${first.proxyPort}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`, '--workers', '2', '--redis-url', redis.url];
      second = spawnSidecar(args, { GW_ADMIN_SECRET: 'workers-admin-secret' });
      const exited = await Promise.race([second.exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 20_000))]);
      expect(exited, second.stderr()).toBe(1);
      expect(second.stderr()).toContain(`gw-sidecar: cannot start: --listen (GW_LISTEN): listen EADDRINUSE: address already in use 127.0.0.1:${first.proxyPort} (another gateway's workers may hold it)\n`);
      // Its log line says the same, without a stack trace to bury it.
      const fatal = second.stdout().split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.level === 60);
      expect(fatal).toMatchObject({ code: 'EADDRINUSE', msg: expect.stringContaining('--listen (GW_LISTEN): listen EADDRINUSE') });
      expect(fatal).not.toHaveProperty('err');
      // `kept`: an earlier case of this file deletes `open` from the shared folder.
      expect(await statuses(`${first.proxy}/kept/x`, 10)).toEqual(Array(10).fill(200));
    } finally {
      for (const child of [first.child, second]) if (child && child.proc.exitCode === null) child.proc.kill('SIGTERM');
      await Promise.all([first.child.exited, second?.exited]);
    }
  });

  it('gives the slots of a stream rate-limit resource for every worker: its count per interval across them, through a worker\'s restart', async () => {
    const gw = await startGateway(dir, redis.url, '2', { GW_STREAM_RATE_LIMIT_MAX_WAIT_MS: '0' });
    try {
      // 10 upstream calls an hour, no waiting. Of 60 new connections each worker meets more
      // than 10 (all but certainly), so exactly 10 pass; a limiter per worker would pass 20.
      const first = await statuses(`${gw.proxy}/guarded/x`, 60);
      expect(first.filter((s) => s === 200)).toHaveLength(10);
      expect(first.filter((s) => s === 429)).toHaveLength(50);
      const refused = await call(`${gw.proxy}/guarded/x`);
      expect(refused.status).toBe(429);
      expect(refused.json()).toEqual({ error: 'Upstream rate limit exceeded' });
      // The next slot is the next hour's.
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(3500);

      // The slots given are the primary's: a worker started again gives none of them anew.
      const pids = await childPids(gw.child.proc.pid!);
      process.kill(pids[0]!, 'SIGKILL');
      await eventually(async () => {
        const res = await call(`${gw.health}/readyz`);
        return (await childPids(gw.child.proc.pid!)).length === 2 && res.status === 200 && (res.json().problems as unknown[]).length === 0;
      }, 20_000, 'worker restarted and ready');
      expect(await statuses(`${gw.proxy}/guarded/x`, 30)).toEqual(Array(30).fill(429));
      expect(await statuses(`${gw.proxy}/kept/x`, 4)).toEqual(Array(4).fill(200));
    } finally {
      gw.child.proc.kill('SIGTERM');
      expect(await gw.child.exited).toBe(0);
    }
  });

  it('gives back the stream slots a stalled primary gave after the workers stopped waiting and decided alone', async () => {
    const gw = await startGateway(dir, redis.url, '2', { GW_STREAM_RATE_LIMIT_MAX_WAIT_MS: '0' });
    const primary = gw.child.proc.pid!;
    try {
      // The primary stops: each worker waits 1 s for it, then its own limiter (4 an hour) decides.
      process.kill(primary, 'SIGSTOP');
      expect(await statuses(`${gw.proxy}/stalled/x`, 4)).toEqual(Array(4).fill(200));
      // Back, it answers the calls nobody waits for: the 4 slots of the hour it gives go back.
      process.kill(primary, 'SIGCONT');
      await eventually(async () => (await call(`${gw.health}/readyz`)).status === 200, 10_000, 'the primary answering');
      await eventually(async () => (await call(`${gw.proxy}/stalled/x`)).status === 200, 5_000, 'a slot given back');
      expect((await statuses(`${gw.proxy}/stalled/x`, 6)).filter((status) => status === 200)).toHaveLength(3);
    } finally {
      process.kill(primary, 'SIGCONT');
      gw.child.proc.kill('SIGTERM');
      expect(await gw.child.exited).toBe(0);
    }
  });

  it('a worker joins the proxy port only once warmed up: until then the port refuses and /readyz names each worker starting', async () => {
    const { child, health, proxy, proxyPort, firstReadyz } = await warmingGateway('workers-warm-up');
    try {
      // From the first answer on, while the workers load their code and then warm up: not a
      // readiness call that timed out on a worker that could not answer it yet.
      expect(firstReadyz.status).toBe(503);
      expect(firstReadyz.json()).toMatchObject({ status: 'not ready', reasons: ['worker 0: starting', 'worker 1: starting'] });
      const starting = (await call(`${health}/readyz`)).json();
      expect(starting).toMatchObject({ status: 'not ready', reasons: ['worker 0: starting', 'worker 1: starting'] });
      expect(await connectOutcome(proxyPort)).toBe('ECONNREFUSED');
      await eventually(async () => (await call(`${health}/readyz`)).status === 200, 30_000, 'ready after the warm-up');
      expect(await statuses(`${proxy}/kept/x`, 10)).toEqual(Array(10).fill(200));
    } finally {
      child.proc.kill('SIGTERM');
      expect(await child.exited).toBe(0);
    }
  });

  it('stopped while its workers warm up, it stops them and exits 0 at once', async () => {
    const { child } = await warmingGateway('workers-warm-up-stop');
    try {
      const workers = await childPids(child.proc.pid!);
      expect(workers).toHaveLength(2);
      const stopped = Date.now();
      child.proc.kill('SIGTERM');
      expect(await child.exited, child.stderr()).toBe(0);
      expect(Date.now() - stopped).toBeLessThan(5_000);
      expect(workers.filter((pid) => isAlive(pid))).toEqual([]);
    } finally {
      if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
    }
  });

  it('workers still warming up end when their primary is killed, instead of living on without it', async () => {
    const { child } = await warmingGateway('workers-warm-up-orphans');
    const workers = await childPids(child.proc.pid!);
    expect(workers).toHaveLength(2);
    child.proc.kill('SIGKILL');
    await eventually(() => workers.every((pid) => !isAlive(pid)), 5_000, 'the workers to end');
  });

  it('without GW_INSTANCE_ID, names its workers after the primary\'s default id, so DRL splits a limit between exactly them', async () => {
    await client.flushall();
    const gw = await startGateway(dir, redis.url, '2', { GW_INSTANCE_ID: undefined });
    try {
      const gatewayId = `${hostname()}-${gw.child.proc.pid}`;
      await eventually(async () => (await client.zrange(gatewayHeartbeatKey('limited'), '0', '-1')).length === 2, 10_000, 'two heartbeats');
      expect((await client.zrange(gatewayHeartbeatKey('limited'), '0', '-1')).sort()).toEqual([`${gatewayId}-w0`, `${gatewayId}-w1`]);
      // 20 an hour over two workers: a share of 10 each, and both meet more than 10 of 100
      // new connections (all but certainly). A worker that counted a third gateway would hold 6.
      const limited = await statuses(`${gw.proxy}/limited/x`, 100);
      expect(limited.filter((s) => s === 200)).toHaveLength(20);
    } finally {
      gw.child.proc.kill('SIGTERM');
      expect(await gw.child.exited).toBe(0);
    }
  });

  it('kills and starts again a worker whose event loop stops turning, which its primary\'s /healthz cannot see', async () => {
    const gw = await startGateway(dir, redis.url, '2');
    try {
      const primary = gw.child.proc.pid!;
      const [stuck, other] = await childPids(primary);
      process.kill(stuck!, 'SIGSTOP');
      expect((await call(`${gw.health}/healthz`)).status).toBe(200);
      // Five liveness asks of 2 s unanswered, then the restart delay and the new worker's start.
      await eventually(async () => !(await childPids(primary)).includes(stuck!), 25_000, 'the stopped worker killed');
      await eventually(async () => (await childPids(primary)).length === 2 && (await call(`${gw.health}/readyz`)).status === 200, 30_000, 'a new worker ready');
      expect((await childPids(primary)).includes(other!)).toBe(true);
      expect(await statuses(`${gw.proxy}/kept/x`, 20)).toEqual(Array(20).fill(200));
      expect((await call(`${gw.health}/metrics`)).text).toMatch(/^gw_worker_exits_total\{code="SIGKILL"\} 1$/m);
      // Said once: the asks made while the killed worker was on its way out are no second verdict.
      expect(gw.child.stdout().split('liveness asks; killing it').length - 1).toBe(1);
    } finally {
      gw.child.proc.kill('SIGTERM');
      expect(await gw.child.exited).toBe(0);
    }
  }, 90_000);

  it('shows the last smoothing move of any worker as the one gw_smoothing_allowance', async () => {
    const gw = await startGateway(dir, redis.url, '2', { GW_ENABLE_REDIS_ROLLING_LIMITER: 'true' });
    try {
      for (let i = 0; i < 8; i++) await call(`${gw.proxy}/auth/x`, { headers: { authorization: rawKey } });
      const metrics = (await call(`${gw.health}/metrics`)).text;
      const ups = sumOf(metrics, 'gw_smoothing_events_total');
      expect(ups).toBeGreaterThanOrEqual(2);
      expect(metrics).toMatch(/^gw_smoothing_events_total\{reason="RateLimitSmoothingUp"\} \d+$/m);
      // Only rises so far, each by step from threshold; the workers' own gauges are left out, so one series.
      const series = [...metrics.matchAll(/^gw_smoothing_allowance\{(.*)\} (\d+)$/gm)];
      expect(series.map((m) => [m[1], Number(m[2])])).toEqual([['kind="Key",namespace="default",name="smoothed-key"', 2 + 2 * ups]]);
    } finally {
      gw.child.proc.kill('SIGTERM');
      expect(await gw.child.exited).toBe(0);
    }
  });
});

/** The pids of `parent`'s children, from /proc. */
async function childPids(parent: number): Promise<number[]> {
  try {
    const text = await readFile(`/proc/${parent}/task/${parent}/children`, 'utf8');
    return text.trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
