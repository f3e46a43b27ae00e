/**
 * Every core (issue 13): the sidecar with one worker and with two (`--workers 2`), keyless
 * and with an auth token and the sliding log in Redis, and nginx with one worker process and
 * two as the measure of what a second process can add, all in front of an upstream that
 * answers by itself (nginx again). Interleaved rounds as in the proxy suite.
 *
 * Each target runs under a CPU quota (cpu-quota.ts) of half a core per worker, all its
 * processes together: one worker gets half a core, two share one core. What "two workers
 * against one" asks is whether a second process doubles what one serves given twice the CPU;
 * the quota gives it that on a machine whose cores the load generator, the upstream and Redis
 * share with the target (on two cores, two unbounded workers would take the generator's).
 * Without a quota (not root, no cgroup cpu controller) the suite runs unbounded and says why.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keyHash } from '../../../crds/key-hash.ts';
import { cpuQuota, type CpuQuota } from '../cpu-quota.ts';
import { childPids, CONNECTIONS, measureRounds, roundCount, rowsOf, startSidecarProcess, stopChild, type Target } from '../http-load.ts';
import { startNginx, type RunningNginx } from '../nginx.ts';
import type { BenchSuite } from '../types.ts';
import { benchResources } from './proxy.ts';

/** The share of a core each worker is given. */
const CORES_PER_WORKER = 0.5;
/** Connections for every row: with two workers each still meets the proxy suite's one-process load. */
const CONNECTIONS_PER_ROW = 2 * CONNECTIONS;

const plural = (workers: number): string => `${workers} worker${workers > 1 ? 's' : ''}`;

const workersSuite: BenchSuite = async (ctx) => {
  const children: ChildProcess[] = [];
  const nginxes: RunningNginx[] = [];
  const quotas: CpuQuota[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-workers-'));
  const rawKey = randomBytes(16).toString('hex');
  /** Each kind of row's first (one-worker) name: the baseline of its two-worker row. */
  const firstOf = new Map<string, string>();
  const baselineOf = (kind: string, name: string): string | undefined => {
    if (!firstOf.has(kind)) firstOf.set(kind, name);
    return firstOf.get(kind) === name ? undefined : firstOf.get(kind);
  };
  /** Puts `pids` under a quota for `workers`; the label their rows carry. */
  const confine = async (pids: readonly number[], workers: number): Promise<string> => {
    const quota = await cpuQuota(CORES_PER_WORKER * workers);
    if (typeof quota === 'string') {
      ctx.log(`no CPU quota, the targets run unbounded: ${quota}`);
      return plural(workers);
    }
    quotas.push(quota);
    await quota.add(pids);
    return `${plural(workers)} on ${quota.cores} core${quota.cores === 1 ? '' : 's'}`;
  };
  try {
    // The upstream answers by itself in C, so what the targets can serve is not bounded by an echo server's Node process.
    const upstream = await startNginx(null, 1);
    nginxes.push(upstream);
    await writeFile(join(dir, 'bench.yaml'), benchResources(upstream.url, keyHash(rawKey)));
    const targets: Target[] = [];
    for (const workers of [1, 2]) {
      const nginx = await startNginx(upstream.url, workers);
      nginxes.push(nginx);
      const name = `nginx, ${await confine(nginx.pids, workers)}`;
      targets.push({
        name,
        url: `${nginx.url}/bench`,
        baseline: baselineOf('nginx', name),
        connections: CONNECTIONS_PER_ROW,
        cpu: { proxy: nginx.pids },
      });
    }
    const redisUrl = await ctx.redisUrl();
    for (const workers of [1, 2]) {
      const sidecar = await startSidecarProcess(dir, { redisUrl, env: { GW_WORKERS: String(workers), GW_ENABLE_REDIS_ROLLING_LIMITER: 'true' } });
      children.push(sidecar.child);
      // One worker is the process itself; more are a primary and the workers it forked before it answered ready.
      const forked = childPids(sidecar.child.pid!);
      if (forked.length !== (workers > 1 ? workers : 0)) throw new Error(`the sidecar with ${workers} workers forked ${forked.length}`);
      const proxy = [sidecar.child.pid!, ...forked];
      const label = await confine(proxy, workers);
      const keyless = `sidecar keyless, ${label}`;
      for (const row of [
        { kind: 'sidecar keyless', url: `${sidecar.base}/keyless/bench` },
        { kind: 'sidecar auth-token + sliding log', url: `${sidecar.base}/auth/bench`, headers: { authorization: rawKey } },
      ]) {
        const name = `${row.kind}, ${label}`;
        targets.push({ name, url: row.url, headers: row.headers, baseline: baselineOf(row.kind, name), connections: CONNECTIONS_PER_ROW, cpu: { proxy } });
      }
      // Keyless again through a stream rate-limit resource that is never reached: with two
      // workers each request asks the primary for its slot (docs/architecture.md#workers),
      // so the ratio to keyless on the same workers is what that call costs.
      targets.push({ name: `sidecar keyless + stream rate-limit resource, ${label}`, url: `${sidecar.base}/stream/bench`, baseline: keyless, connections: CONNECTIONS_PER_ROW, cpu: { proxy } });
    }
    const rounds = await measureRounds(ctx, targets, roundCount(3));
    return targets.flatMap((t) => rowsOf('workers', t, rounds));
  } finally {
    await Promise.all([...children.map(stopChild), ...nginxes.map((n) => n.stop())]);
    await Promise.all(quotas.map((q) => q.remove()));
    await rm(dir, { recursive: true, force: true });
  }
};

export default workersSuite;
