/**
 * A fresh sidecar's first seconds under load (docs/architecture.md#warm-up). Sidecars are
 * started one after another as the image runs them, without the warm-up and with the default
 * one (interleaved), on the auth-token + sliding log API with Redis. As soon as `/readyz`
 * answers 200, each is driven open loop at half of what a warmed sidecar serves closed loop
 * (measured first), as a new pod of a rolling update meets its share of the traffic. Rows:
 * the time from the start to ready, the latency percentiles and CPU per request of the first
 * seconds, medians over the starts; and the p99 without the warm-up over the p99 with it.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keyHash } from '../../../crds/key-hash.ts';
import { WARM_UP_DEFAULT_REQUESTS } from '../../../sidecar/warm-up-bounds.ts';
import { freePort } from '../../harness/ports.ts';
import { CONNECTIONS, median, overRounds, spawnEchoUpstream, startSidecarProcess, stopChild, waitFor, withCpuPerRequest } from '../http-load.ts';
import { closedLoop, openLoop } from '../load-generator.ts';
import type { BenchRow, BenchSuite } from '../types.ts';
import { benchResources } from './proxy.ts';

const SUITE = 'warm-up';
const quick = process.env.BENCH_QUICK === '1';
/** Starts per variant. */
const STARTS = quick ? 2 : 4;
/** How long after ready each start is measured: the seconds the warm-up is for. */
const FIRST_MS = 5_000;
/** The limited row's settings, as in the proxy suite. */
const LIMITED_ENV = { GW_ENABLE_REDIS_ROLLING_LIMITER: 'true', GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' };

const VARIANTS = [
  { name: 'without warm-up', env: { GW_WARM_UP_REQUESTS: '0' } },
  { name: `with the default warm-up (${WARM_UP_DEFAULT_REQUESTS} requests)`, env: {} },
] as const;

interface FirstSeconds {
  readyMs: number;
  p50: number;
  p99: number;
  p99_9: number;
  cpu: number;
}

const warmUpSuite: BenchSuite = async (ctx) => {
  const upstreamPort = await freePort();
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const echo = spawnEchoUpstream(upstreamPort);
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-warm-up-'));
  const rawKey = randomBytes(16).toString('hex');
  const headers = { authorization: rawKey };
  try {
    await waitFor(`${upstream}/`);
    await writeFile(join(dir, 'bench.yaml'), benchResources(upstream, keyHash(rawKey)));
    const redisUrl = await ctx.redisUrl();
    // The upstream is warmed once, so only the sidecar is fresh in each start.
    await closedLoop({ url: `${upstream}/bench`, durationMs: 3_000, connections: CONNECTIONS });
    const rate = await halfOfWarmMaximum(dir, redisUrl, headers, ctx.durationMs);
    ctx.log(`driving each fresh sidecar at ${rate} req/s (half of a warmed one's closed-loop maximum) for ${FIRST_MS / 1000} s after ready`);
    const measured = new Map<string, FirstSeconds[]>(VARIANTS.map((v) => [v.name, []]));
    for (let start = 0; start < STARTS; start++) {
      for (const variant of VARIANTS) {
        const run = await firstSeconds({ dir, redisUrl, headers, rate, env: variant.env });
        ctx.log(`${variant.name}, start ${start + 1}: ready after ${run.readyMs.toFixed(0)} ms; first ${FIRST_MS / 1000} s p50 ${run.p50} µs, p99 ${run.p99} µs, p99.9 ${run.p99_9} µs, CPU ${run.cpu.toFixed(0)} µs per request`);
        measured.get(variant.name)!.push(run);
      }
    }
    const rows: BenchRow[] = [];
    for (const variant of VARIANTS) {
      const runs = measured.get(variant.name)!;
      const at = (pick: (r: FirstSeconds) => number): number => median(runs.map(pick));
      const name = `fresh sidecar ${variant.name}, auth-token + sliding log`;
      rows.push(
        { suite: SUITE, name: `${name}: start to ready`, value: at((r) => r.readyMs), unit: 'ms' },
        { suite: SUITE, name: `${name}: first ${FIRST_MS / 1000} s p50`, value: at((r) => r.p50), unit: 'µs' },
        { suite: SUITE, name: `${name}: first ${FIRST_MS / 1000} s p99`, value: at((r) => r.p99), unit: 'µs' },
        { suite: SUITE, name: `${name}: first ${FIRST_MS / 1000} s p99.9`, value: at((r) => r.p99_9), unit: 'µs' },
        { suite: SUITE, name: `${name}: first ${FIRST_MS / 1000} s CPU per request`, value: at((r) => r.cpu), unit: 'µs' },
      );
    }
    const [cold, warmed] = VARIANTS.map((v) => measured.get(v.name)!);
    const ratio = overRounds(cold!.map((run, i) => run.p99 / warmed![i]!.p99));
    rows.push({ suite: SUITE, name: `fresh sidecars: first ${FIRST_MS / 1000} s p99 without the warm-up / with it`, value: ratio.ratio, unit: 'ratio', ...ratio });
    return rows;
  } finally {
    await stopChild(echo);
    await rm(dir, { recursive: true, force: true });
  }
};

interface Start {
  dir: string;
  redisUrl: string;
  headers: Record<string, string>;
  rate: number;
  env: Record<string, string>;
}

/** One fresh sidecar: how long it took to turn ready, and its first seconds under `rate`. */
async function firstSeconds({ dir, redisUrl, headers, rate, env }: Start): Promise<FirstSeconds> {
  const started = performance.now();
  const sidecar = await startSidecarProcess(dir, { redisUrl, env: { ...LIMITED_ENV, ...env }, readyTimeoutMs: 30_000 });
  try {
    const readyMs = performance.now() - started;
    const result = await withCpuPerRequest({ proxy: [sidecar.child.pid!] }, () => openLoop({ url: `${sidecar.base}/auth/bench`, headers, rate, durationMs: FIRST_MS, connections: CONNECTIONS }));
    if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} non-2xx and ${result.errors} errors`);
    const { p50, p99, p99_9 } = result.latencyMicros;
    return { readyMs, p50, p99, p99_9, cpu: result.cpuMicrosPerRequest.proxy! };
  } finally {
    await stopChild(sidecar.child);
  }
}

/** Half of the auth-token row's closed-loop req/s on a sidecar warmed for a few seconds. */
async function halfOfWarmMaximum(dir: string, redisUrl: string, headers: Record<string, string>, durationMs: number): Promise<number> {
  const sidecar = await startSidecarProcess(dir, { redisUrl, env: LIMITED_ENV, readyTimeoutMs: 30_000 });
  try {
    const url = `${sidecar.base}/auth/bench`;
    await closedLoop({ url, headers, durationMs: 5_000, connections: CONNECTIONS });
    return Math.round((await closedLoop({ url, headers, durationMs, connections: CONNECTIONS })).rate / 2);
  } finally {
    await stopChild(sidecar.child);
  }
}

export default warmUpSuite;
