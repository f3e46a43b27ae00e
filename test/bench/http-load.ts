/**
 * What the HTTP bench suites share: child processes for an echo upstream and sidecars,
 * and autocannon runs measured in interleaved rounds. Every server runs in its own
 * process so the load generator does not share an event loop with what it measures.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { freePort } from '../harness/ports.ts';
import type { BenchContext, BenchRow } from './types.ts';

export interface CannonResult {
  requests: { average: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
}
type Cannon = (opts: { url: string; connections: number; duration: number; headers?: Record<string, string> }) => Promise<CannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as Cannon;

export const REPO_ROOT = new URL('../../', import.meta.url).pathname;

export async function waitFor(url: string, timeoutMs = 20_000): Promise<void> {
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

export function spawnNode(args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  return spawn(process.execPath, args, { cwd: REPO_ROOT, env: { ...process.env, GW_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
}

export function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** The demo's JSON echo upstream on `port`, as a child process. */
export function spawnEchoUpstream(port: number): ChildProcess {
  return spawnNode(['--input-type=module', '-e', `import { startEchoUpstream } from '${REPO_ROOT}demo/upstream.ts'; await startEchoUpstream(${port});`]);
}

/** A folder-mode sidecar on free loopback ports, once its /readyz answers (a large folder takes a while to load). */
export async function startSidecarProcess(
  dir: string,
  options: { redisUrl?: string; env?: NodeJS.ProcessEnv; readyTimeoutMs?: number } = {},
): Promise<{ base: string; child: ChildProcess }> {
  const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
  const args = ['sidecar/main.ts', '--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`];
  args.push('--health-listen', `127.0.0.1:${health}`);
  if (options.redisUrl !== undefined) args.push('--redis-url', options.redisUrl);
  const child = spawnNode(args, options.env);
  try {
    await waitFor(`http://127.0.0.1:${health}/readyz`, options.readyTimeoutMs);
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { base: `http://127.0.0.1:${listen}`, child };
}

export interface Target {
  name: string;
  url: string;
  baseline?: string;
  headers?: Record<string, string>;
}

async function measure(ctx: BenchContext, target: Target): Promise<CannonResult> {
  const { name, url, headers } = target;
  await autocannon({ url, connections: 8, duration: 1, headers });
  const result = await autocannon({ url, connections: 32, duration: Math.max(1, Math.round(ctx.durationMs / 1000)), headers });
  ctx.log(`${name}: ${Math.round(result.requests.average)} req/s, p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms, non-2xx ${result.non2xx}, errors ${result.errors}`);
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${name}: ${result.non2xx} non-2xx and ${result.errors} errors`);
  return result;
}

/** Targets are measured in interleaved rounds and each keeps its best round, so a burst of other load on a shared machine skews one round, not the comparison. */
export async function measureRounds(ctx: BenchContext, targets: Target[], rounds: number): Promise<Map<string, CannonResult>> {
  const best = new Map<string, CannonResult>();
  for (let round = 0; round < rounds; round += 1) {
    for (const target of targets) {
      const result = await measure(ctx, target);
      const previous = best.get(target.name);
      if (!previous || result.requests.average > previous.requests.average) best.set(target.name, result);
    }
  }
  return best;
}

/** req/s (compared with `baseline` when given), p50 and p99 of one target. */
export function rowsOf(suite: string, name: string, result: CannonResult, baseline?: string): BenchRow[] {
  return [
    { suite, name, value: Math.round(result.requests.average), unit: 'req/s', ...(baseline ? { baseline } : {}) },
    { suite, name: `${name} p50`, value: result.latency.p50, unit: 'ms' },
    { suite, name: `${name} p99`, value: result.latency.p99, unit: 'ms' },
  ];
}
