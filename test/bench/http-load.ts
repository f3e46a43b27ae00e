/**
 * What the HTTP bench suites share: child processes for an echo upstream and sidecars, and
 * closed-loop runs of the C load generator (load-generator.ts) measured in interleaved
 * rounds. Every server runs in its own process, and so does the generator.
 * On a shared machine other load comes and goes: a row is the median of its rounds, and
 * its ratio the median of the ratios taken within each round (target and baseline
 * measured minutes apart would compare two different loads).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { bundleOnce } from '../../scripts/build/bundle.ts';
import { imageNodeFlags } from '../../scripts/images/build.ts';
import { jemallocEnv } from '../harness/install-image-host-files.ts';
import { freePort } from '../harness/ports.ts';
import { chartNodeOptions } from '../support/chart-node-options.ts';
import { closedLoop, type LoadResult } from './load-generator.ts';
import type { SidecarBuild } from './revision.ts';
import type { BenchContext, BenchRow, RoundSpread } from './types.ts';


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

/**
 * The NODE_OPTIONS of every sidecar the bench starts: the chart's for injected sidecars
 * (sidecar.nodeOptions, V8's heap sizes), so the rows are the installed sidecar's;
 * BENCH_SIDECAR_NODE_OPTIONS replaces them ('' for Node's own sizing).
 */
export const SIDECAR_NODE_OPTIONS = process.env.BENCH_SIDECAR_NODE_OPTIONS ?? chartNodeOptions('sidecar');

/**
 * A folder-mode sidecar on free loopback ports, once its /readyz answers (a large folder takes a
 * while to load). It runs as an injected sidecar runs: the bundle its image runs
 * (scripts/build/bundle.ts, built once per bench run), with the node flags of the image's
 * entrypoint (or `nodeFlags`), SIDECAR_NODE_OPTIONS and the image's allocator (jemalloc, which
 * the bench installs like redis-server). `build` runs another revision's sidecar instead
 * (revision.ts), with its own flags.
 */
export async function startSidecarProcess(
  dir: string,
  options: { redisUrl?: string; env?: NodeJS.ProcessEnv; readyTimeoutMs?: number; nodeFlags?: string[]; build?: SidecarBuild } = {},
): Promise<{ base: string; health: string; child: ChildProcess }> {
  const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
  const build = options.build ?? { entry: await bundleOnce('sidecar'), nodeFlags: imageNodeFlags('sidecar'), nodeOptions: SIDECAR_NODE_OPTIONS };
  const args = [...(options.nodeFlags ?? build.nodeFlags), build.entry, '--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`];
  args.push('--health-listen', `127.0.0.1:${health}`);
  if (options.redisUrl !== undefined) args.push('--redis-url', options.redisUrl);
  // One process unless a suite asks for more: the rows compare one core's work.
  const child = spawnNode(args, { GW_WORKERS: '1', NODE_OPTIONS: build.nodeOptions, ...await jemallocEnv(), ...options.env });
  try {
    await waitFor(`http://127.0.0.1:${health}/readyz`, options.readyTimeoutMs);
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { base: `http://127.0.0.1:${listen}`, health: `http://127.0.0.1:${health}`, child };
}

export interface Target {
  name: string;
  url: string;
  baseline?: string;
  headers?: Record<string, string>;
  /** The requests take turns among this many variants of `headers` (load-generator.ts). */
  rotate?: number;
  connections?: number;
  /**
   * The processes whose CPU time each request costs, by the name of their part (the proxy,
   * Redis): a row each, in µs per request. Unlike req/s, which every other process on a
   * shared machine moves, this is what the target itself spends.
   */
  cpu?: Record<string, readonly number[]>;
  /** `--against`: the name of this tree's row that this row measures the other revision's build of (revision.ts). */
  twinOf?: string;
}

/** The processes `pid` started that still run (its main thread's children, as Linux lists them). */
export function childPids(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number);
}

/** Linux reports a process's CPU time in clock ticks of 1/100 s (USER_HZ, fixed by the kernel's ABI). */
const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) the processes have used so far; 0 for one that is gone. */
export function cpuSeconds(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      // Fields after the command name (which may hold spaces), from the state: utime and stime are the 12th and 13th.
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // exited
    }
  }
  return ticks / TICKS_PER_SECOND;
}

/** A load run's result with what each request cost each part (its processes), in CPU µs. */
export type WithCpu<R extends LoadResult> = R & { cpuMicrosPerRequest: Record<string, number> };

/** Runs `load` and charges each part's CPU time during it to the requests it answered. */
export async function withCpuPerRequest<R extends LoadResult>(cpu: Record<string, readonly number[]>, load: () => Promise<R>): Promise<WithCpu<R>> {
  const parts = Object.entries(cpu);
  const before = parts.map(([, pids]) => cpuSeconds(pids));
  const result = await load();
  const served = Math.max(1, result.answered);
  const cpuMicrosPerRequest = Object.fromEntries(parts.map(([part, pids], i) => [part, ((cpuSeconds(pids) - before[i]!) * 1e6) / served]));
  return { ...result, cpuMicrosPerRequest };
}

/** One closed-loop run of a target, with the CPU µs per request of each of its parts. */
export type Measured = WithCpu<LoadResult>;

/** Connections of a measured run, unless the target says otherwise: each keeps one request in flight. */
export const CONNECTIONS = 32;

const ms = (micros: number): string => (micros / 1000).toFixed(2);

async function measure(ctx: BenchContext, target: Target): Promise<Measured> {
  const { name, url, headers, rotate, connections = CONNECTIONS } = target;
  // A warm-up, so the measured run meets compiled code and open connections upstream.
  await closedLoop({ url, durationMs: 1_000, connections: 8, headers, rotate });
  const result = await withCpuPerRequest(target.cpu ?? {}, () => closedLoop({ url, durationMs: ctx.durationMs, connections, headers, rotate }));
  const cpu = Object.entries(result.cpuMicrosPerRequest)
    .map(([part, micros]) => `${part} ${micros.toFixed(0)} µs`)
    .join(', ');
  const { p50, p99, p99_9 } = result.latencyMicros;
  ctx.log(`${name}: ${Math.round(result.rate)} req/s, p50 ${ms(p50)} ms, p99 ${ms(p99)} ms, p99.9 ${ms(p99_9)} ms, non-2xx ${result.non2xx}, errors ${result.errors}${cpu ? `; CPU per request: ${cpu}` : ''}`);
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${name}: ${result.non2xx} non-2xx and ${result.errors} errors`);
  return result;
}

/** Every round of every target, by target name, in round order. */
export type Rounds = Map<string, Measured[]>;

/**
 * Targets are measured in interleaved rounds, so a burst of other load on a shared machine skews
 * one round, not the comparison. A row and its twin (`twinOf`, right after it) take turns going
 * first: on this machine whichever of two identical builds went second read 2% dearer.
 */
export async function measureRounds(ctx: BenchContext, targets: Target[], rounds: number): Promise<Rounds> {
  const all: Rounds = new Map(targets.map((t) => [t.name, []]));
  for (let round = 0; round < rounds; round += 1) {
    for (const target of roundOrder(targets, round)) all.get(target.name)!.push(await measure(ctx, target));
  }
  return all;
}

/** This tree's rows paired with the name of the other revision's row of the same (`--against`). */
export function twinsOf(targets: readonly Target[]): [Target, string][] {
  const rows = new Map(targets.map((t) => [t.name, t]));
  return targets.flatMap((twin) => {
    const row = twin.twinOf === undefined ? undefined : rows.get(twin.twinOf);
    return row === undefined ? [] : [[row, twin.name] as [Target, string]];
  });
}

/** The order `targets` are measured in, in round `round` (from 0): each twin goes before the row it twins in every other round. */
export function roundOrder(targets: readonly Target[], round: number): readonly Target[] {
  if (round % 2 === 0) return targets;
  const order = [...targets];
  for (let i = 0; i + 1 < order.length; i += 1) {
    if (order[i + 1]!.twinOf !== order[i]!.name) continue;
    [order[i], order[i + 1]] = [order[i + 1]!, order[i]!];
    i += 1;
  }
  return order;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The rounds of the HTTP suites unless BENCH_ROUNDS says: 3, or 4 with `--against`, so each of two twins goes first as often. */
export const httpRounds = (ctx: Pick<BenchContext, 'against'>): number => roundCount(ctx.against === undefined ? 3 : 4);

/** Rounds a suite runs: BENCH_ROUNDS, else `fallback`. */
export function roundCount(fallback: number): number {
  const n = Number(process.env.BENCH_ROUNDS);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}

const reqs = (r: LoadResult): number => r.rate;

/**
 * A ratio taken in each round: its median, and its lowest and highest round, so a reader (and
 * `--compare`) can tell a change from one run's noise (README.md#benchmarks).
 */
export function overRounds(perRound: readonly number[]): { ratio: number; spread: RoundSpread } {
  return { ratio: median(perRound), spread: { low: Math.min(...perRound), high: Math.max(...perRound), rounds: perRound.length } };
}

/** `name`'s req/s divided by `baseline`'s in the same round, over the rounds. */
export function ratioOverRounds(rounds: Rounds, name: string, baseline: string): { ratio: number; spread: RoundSpread } {
  const base = rounds.get(baseline) ?? [];
  return overRounds((rounds.get(name) ?? []).map((r, i) => reqs(r) / reqs(base[i]!)));
}

/**
 * `baseline`'s CPU per request in `part` divided by `name`'s in the same round, over the
 * rounds: what a request costs, read like a req/s ratio (0.8: a request costs a quarter more
 * than the baseline's). Unlike req/s on a machine the load generator, the upstream and Redis
 * share, it moves only with what the part itself spends.
 */
export function cpuRatioOverRounds(rounds: Rounds, name: string, baseline: string, part: string): { ratio: number; spread: RoundSpread } {
  const base = rounds.get(baseline) ?? [];
  return overRounds((rounds.get(name) ?? []).map((r, i) => base[i]!.cpuMicrosPerRequest[part]! / r.cpuMicrosPerRequest[part]!));
}

/** Median req/s (and the median of its per-round ratios to `target.baseline`), p50, p99 and p99.9 of one target. */
export function rowsOf(suite: string, target: Target, rounds: Rounds): BenchRow[] {
  const own = rounds.get(target.name) ?? [];
  const ratio = target.baseline === undefined ? {} : { baseline: target.baseline, ...ratioOverRounds(rounds, target.name, target.baseline) };
  return [
    { suite, name: target.name, value: Math.round(median(own.map(reqs))), unit: 'req/s', ...ratio },
    { suite, name: `${target.name} p50`, value: median(own.map((r) => r.latencyMicros.p50)) / 1000, unit: 'ms' },
    { suite, name: `${target.name} p99`, value: median(own.map((r) => r.latencyMicros.p99)) / 1000, unit: 'ms' },
    { suite, name: `${target.name} p99.9`, value: median(own.map((r) => r.latencyMicros.p99_9)) / 1000, unit: 'ms' },
    ...Object.keys(target.cpu ?? {}).map((part) => ({
      suite,
      name: `${target.name} CPU per request: ${part}`,
      value: median(own.map((r) => r.cpuMicrosPerRequest[part]!)),
      unit: 'µs',
    })),
  ];
}
