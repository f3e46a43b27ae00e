/**
 * Proxy throughput and latency (issue 5 benchmark): the same echo upstream called
 * directly, through a bare undici forwarder with no gateway logic, and through the
 * sidecar (keyless API; auth-token API with the sliding log in Redis) with each
 * forwarder. Each server runs in its own process; autocannon drives them one after
 * another in this run (two interleaved rounds, best of each kept), so the ratios compare
 * like with like.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keyHash } from '../../../crds/key-hash.ts';
import { freePort } from '../../harness/ports.ts';
import type { BenchContext, BenchRow, BenchSuite } from '../types.ts';

interface CannonResult {
  requests: { average: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
}
type Cannon = (opts: { url: string; connections: number; duration: number; headers?: Record<string, string> }) => Promise<CannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as Cannon;

const root = new URL('../../../', import.meta.url).pathname;
const node = process.execPath;


async function waitFor(url: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(url)).status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not come up`);
}

function spawnNode(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  return spawn(node, args, { cwd: root, env: { ...process.env, GW_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

const upstreamScript = (port: number): string =>
  `import { startEchoUpstream } from '${root}sidecar/demo-upstream.ts'; await startEchoUpstream(${port});`;

const bareScript = (port: number, upstream: string): string => `
import { createServer } from 'node:http';
import { UndiciForwarder } from '${root}sidecar/proxy/undici-forwarder.ts';
const f = new UndiciForwarder({ timeoutMs: () => 30000, maxBodyBytes: () => 1e7 });
createServer((req, res) => void f.forward({ req, res, origin: '${upstream}', path: req.url, rateHeaders: null })).listen(${port}, '127.0.0.1');`;

function resources(upstream: string, hash: string): string {
  return `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: bench-keyless }
spec: { api_id: bench-keyless, name: bench keyless, use_keyless: true, proxy: { listen_path: /keyless/, target_url: '${upstream}', strip_listen_path: true } }
---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: bench-auth }
spec: { api_id: bench-auth, name: bench auth, use_keyless: false, proxy: { listen_path: /auth/, target_url: '${upstream}', strip_listen_path: true } }
---
apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: bench-key }
spec:
  key_hash: ${hash}
  rate: 1000000000
  per: 1
  access_rights: { bench-auth: { api_id: bench-auth, api_name: bench auth } }
`;
}

async function measure(ctx: BenchContext, name: string, url: string, headers?: Record<string, string>): Promise<CannonResult> {
  await autocannon({ url, connections: 8, duration: 1, headers });
  const result = await autocannon({ url, connections: 32, duration: Math.max(1, Math.round(ctx.durationMs / 1000)), headers });
  ctx.log(`${name}: ${Math.round(result.requests.average)} req/s, p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms, non-2xx ${result.non2xx}, errors ${result.errors}`);
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${name}: ${result.non2xx} non-2xx and ${result.errors} errors`);
  return result;
}

function rowsOf(name: string, result: CannonResult, baseline?: string): BenchRow[] {
  return [
    { suite: 'proxy', name, value: Math.round(result.requests.average), unit: 'req/s', ...(baseline ? { baseline } : {}) },
    { suite: 'proxy', name: `${name} p50`, value: result.latency.p50, unit: 'ms' },
    { suite: 'proxy', name: `${name} p99`, value: result.latency.p99, unit: 'ms' },
  ];
}

interface Target {
  name: string;
  url: string;
  baseline?: string;
  headers?: Record<string, string>;
}

async function startSidecarProcess(ctx: BenchContext, forwarder: string, dir: string): Promise<{ base: string; child: ChildProcess }> {
  const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
  const args = ['sidecar/main.ts', '--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`];
  args.push('--health-listen', `127.0.0.1:${health}`, '--redis-url', await ctx.redisUrl());
  const child = spawnNode(args, { GW_FORWARDER: forwarder, GW_ENABLE_REDIS_ROLLING_LIMITER: 'true' });
  try {
    await waitFor(`http://127.0.0.1:${health}/readyz`);
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { base: `http://127.0.0.1:${listen}`, child };
}

/** Targets are measured in interleaved rounds and each keeps its best round, so a burst of other load on a shared machine skews one round, not the comparison. */
async function measureRounds(ctx: BenchContext, targets: Target[], rounds: number): Promise<Map<string, CannonResult>> {
  const best = new Map<string, CannonResult>();
  for (let round = 0; round < rounds; round += 1) {
    for (const target of targets) {
      const result = await measure(ctx, target.name, target.url, target.headers);
      const previous = best.get(target.name);
      if (!previous || result.requests.average > previous.requests.average) best.set(target.name, result);
    }
  }
  return best;
}

const proxySuite: BenchSuite = async (ctx) => {
  const [upstreamPort, barePort] = await Promise.all([freePort(), freePort()]);
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  const children = [spawnNode(['--input-type=module', '-e', upstreamScript(upstreamPort)]), spawnNode(['--input-type=module', '-e', bareScript(barePort, upstreamUrl)])];
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-'));
  const rawKey = randomBytes(16).toString('hex');
  try {
    await writeFile(join(dir, 'bench.yaml'), resources(upstreamUrl, keyHash(rawKey)));
    await Promise.all([waitFor(`${upstreamUrl}/`), waitFor(`http://127.0.0.1:${barePort}/`)]);
    const targets: Target[] = [
      { name: 'upstream direct', url: `${upstreamUrl}/bench` },
      { name: 'bare undici forwarder', url: `http://127.0.0.1:${barePort}/bench`, baseline: 'upstream direct' },
    ];
    for (const forwarder of ['undici', 'http-proxy']) {
      const sidecar = await startSidecarProcess(ctx, forwarder, dir);
      children.push(sidecar.child);
      const baseline = 'bare undici forwarder';
      targets.push({ name: `sidecar keyless (${forwarder})`, url: `${sidecar.base}/keyless/bench`, baseline });
      targets.push({ name: `sidecar auth-token + sliding log (${forwarder})`, url: `${sidecar.base}/auth/bench`, baseline, headers: { authorization: rawKey } });
    }
    const results = await measureRounds(ctx, targets, 2);
    const rows = targets.flatMap((t) => rowsOf(t.name, results.get(t.name) as CannonResult, t.baseline));
    const direct = rows[0]?.value ?? 0;
    for (const row of rows.filter((r) => r.unit === 'req/s' && r.name.startsWith('sidecar'))) {
      rows.push({ suite: 'proxy', name: `${row.name} vs direct`, value: direct === 0 ? 0 : row.value / direct, unit: 'ratio' });
    }
    return rows;
  } finally {
    await Promise.all(children.map(stopChild));
    await rm(dir, { recursive: true, force: true });
  }
};

export default proxySuite;
