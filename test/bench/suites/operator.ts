/**
 * Operator benchmark (issue 6): the time from applying an ApiDefinition to its compiled
 * ConfigMap existing (p50/p99 over 100 sequential applies), against the API server's own
 * floor (create a ConfigMap, see its watch event) measured the same way in the same run;
 * and the time and peak memory (VmHWM of the operator process) to reconcile 1,000
 * ApiDefinitions and 10,000 Keys from scratch. BENCH_QUICK=1 uses 20 applies, 100 APIs
 * and 1,000 Keys. The operator runs as its own process, from the bundle its image runs
 * (scripts/build/bundle.ts), so its memory is the installed operator's.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { CoreV1Api, CustomObjectsApi, KubeConfig, Watch } from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { kinds } from '../../../crds/kinds.ts';
import { bundleOnce } from '../../../scripts/build/bundle.ts';
import { imageNodeFlags } from '../../../scripts/images/build.ts';
import { apiRequests, requestsBetween } from '../../harness/api-requests.ts';
import { cpuSeconds } from '../http-load.ts';
import { jemallocEnv } from '../../harness/install-image-host-files.ts';
import { freePort } from '../../harness/ports.ts';
import { chartNodeOptions } from '../../support/chart-node-options.ts';
import { sampleValue } from '../../support/metric-sample.ts';
import { isReady, type WithConditions } from '../../support/ready.ts';
import type { BenchContext, BenchRow, BenchSuite } from '../types.ts';

const root = new URL('../../../', import.meta.url).pathname;
const quick = process.env.BENCH_QUICK === '1';
const APPLIES = quick ? 20 : 100;
const SCRATCH_APIS = quick ? 100 : 1_000;
/** BENCH_OPERATOR_KEYS sets the cold start's Key count (docs/benchmarks.md#operator reports a run with 100,000). */
const SCRATCH_KEYS = Number(process.env.BENCH_OPERATOR_KEYS ?? (quick ? 1_000 : 10_000));
const POLICIES = 20;
const STEADY_WAIT_MS = 15_000;
const SUITE = 'operator';


const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;

interface OperatorProcess {
  child: ChildProcess;
  healthPort: number;
  stop(): Promise<void>;
  peakRssBytes(): number;
  rssBytes(): number;
}

/** BENCH_CPU_PROF=DIR writes a CPU profile of each operator run there (open it in Chrome DevTools). */
const profileArgs = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
/**
 * The operator runs on jemalloc with the heap settings the chart ships (operator.nodeOptions),
 * as its image runs it, so the figures are the installed operator's; BENCH_OPERATOR_NODE_FLAGS replaces them (to try others).
 */
const nodeFlags = (process.env.BENCH_OPERATOR_NODE_FLAGS ?? chartNodeOptions('operator')).split(' ').filter(Boolean);
/** Node's own flags in the image's entrypoint (`node <flags> gw-operator.mjs`). */
const imageFlags = imageNodeFlags('operator');

async function spawnOperator(kubeconfig: string, redisUrl: string, namespace: string): Promise<OperatorProcess> {
  const entry = await bundleOnce('operator');
  const healthPort = await freePort();
  const child = spawn(
    process.execPath,
    [...profileArgs, ...imageFlags, ...nodeFlags, entry, '--kubeconfig', kubeconfig, '--redis-url', redisUrl, '--watch-namespaces', namespace, '--webhook', 'false', '--leader-election', 'false', '--health-listen', `127.0.0.1:${healthPort}`],
    { cwd: root, env: { ...process.env, GW_LOG_LEVEL: 'error', ...await jemallocEnv() }, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${healthPort}/healthz`)).ok) break;
    } catch {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error('operator did not start');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    child,
    healthPort,
    peakRssBytes: () => procStatusBytes(child, 'VmHWM'),
    rssBytes: () => procStatusBytes(child, 'VmRSS'),
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

function procStatusBytes(child: ChildProcess, field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) * 1024;
}

function apiBody(name: string) {
  return {
    apiVersion: 'gw.dev/v1alpha1',
    kind: 'ApiDefinition',
    metadata: { name },
    spec: {
      api_id: name,
      use_keyless: false,
      proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' },
      global_rate_limit: { rate: 100, per: 60 },
      use_extended_paths: true,
      extended_paths: { rate_limit: [{ path: '/users/[0-9]+', method: 'GET', rate: 10, per: 1 }] },
    },
  };
}

/** Waits for the ADDED watch event of each name in turn; `act` creates the object. */
async function timeToWatchEvent(kc: KubeConfig, namespace: string, names: string[], act: (name: string) => Promise<unknown>): Promise<number[]> {
  const seen = new Map<string, () => void>();
  const watch = new Watch(kc);
  const request = await watch.watch(
    `/api/v1/namespaces/${namespace}/configmaps`,
    {},
    (phase, obj: { metadata?: { name?: string } }) => {
      if (phase === 'ADDED') seen.get(obj.metadata?.name ?? '')?.();
    },
    () => undefined,
  );
  const times: number[] = [];
  try {
    for (const name of names) {
      const target = name.startsWith('floor-') ? name : `gw-api-${name}`;
      const appeared = new Promise<void>((resolve) => seen.set(target, resolve));
      const start = performance.now();
      await act(name);
      await appeared;
      times.push(performance.now() - start);
    }
  } finally {
    request.abort();
  }
  return times.sort((a, b) => a - b);
}

interface WatchedObject extends WithConditions {
  metadata?: { name?: string; resourceVersion?: string };
}

const MAX_WATCH_RESTARTS = 50;

interface WatchTracker {
  /** Objects that match `counts` now. */
  count(): number;
  stop(): void;
}

/**
 * Counts the objects under `path` that `counts` accepts, from a watch: it starts with the
 * present state (a watch without a resourceVersion sends every object as ADDED), and resolves
 * once `initial` objects have been seen; a watch the server ends resumes from the last event.
 */
async function trackWatch(kc: KubeConfig, path: string, query: Record<string, string>, counts: (obj: WatchedObject) => boolean, initial: number): Promise<WatchTracker> {
  const matching = new Set<string>();
  const seen = new Set<string>();
  let resourceVersion: string | undefined;
  let stopped = false;
  let restarts = 0;
  let abort: AbortController | undefined;
  let listed: () => void = () => undefined;
  const allSeen = new Promise<void>((resolve) => (listed = resolve));
  const start = async (): Promise<void> => {
    abort = await new Watch(kc).watch(
      path,
      resourceVersion ? { ...query, resourceVersion } : query,
      (phase, obj: WatchedObject) => {
        if (phase !== 'ADDED' && phase !== 'MODIFIED' && phase !== 'DELETED') return;
        const name = obj.metadata?.name ?? '';
        resourceVersion = obj.metadata?.resourceVersion ?? resourceVersion;
        if (phase === 'DELETED' || !counts(obj)) matching.delete(name);
        else matching.add(name);
        seen.add(name);
        if (seen.size >= initial) listed();
      },
      () => {
        // Bounded: a watch that keeps failing leaves the count stale, and the caller's deadline ends the run.
        if (!stopped && restarts++ < MAX_WATCH_RESTARTS) void start();
      },
    );
  };
  await start();
  if (initial === 0) listed();
  await allSeen;
  return {
    count: () => matching.size,
    stop: () => {
      stopped = true;
      abort?.abort();
    },
  };
}

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

async function applyLatency(ctx: BenchContext, kc: KubeConfig, kubeconfig: string, redisUrl: string): Promise<BenchRow[]> {
  const core = kc.makeApiClient(CoreV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  const namespace = 'bench-apply';
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  const floor = await timeToWatchEvent(kc, namespace, Array.from({ length: APPLIES }, (_, i) => `floor-${i}`), (name) =>
    core.createNamespacedConfigMap({ namespace, body: { metadata: { name }, data: { 'config.json': '{}' } } }),
  );
  const operator = await spawnOperator(kubeconfig, redisUrl, namespace);
  await new Promise((r) => setTimeout(r, 1_000));
  const idleRss = operator.rssBytes() / (1024 * 1024);
  try {
    const { group, version, plural } = kinds.ApiDefinition;
    const times = await timeToWatchEvent(kc, namespace, Array.from({ length: APPLIES }, (_, i) => `apply-${i}`), (name) =>
      custom.createNamespacedCustomObject({ group, version, namespace, plural, body: apiBody(name) }),
    );
    ctx.log(`apply→ConfigMap p50 ${percentile(times, 50).toFixed(1)} ms, floor p50 ${percentile(floor, 50).toFixed(1)} ms`);
    return [
      { suite: SUITE, name: 'RSS of an idle operator (no objects)', value: idleRss, unit: 'MiB' },
      { suite: SUITE, name: 'API server floor: create ConfigMap → watch event p50', value: percentile(floor, 50), unit: 'ms' },
      { suite: SUITE, name: 'API server floor: create ConfigMap → watch event p99', value: percentile(floor, 99), unit: 'ms' },
      { suite: SUITE, name: `apply ApiDefinition → ConfigMap exists p50 (${APPLIES} applies)`, value: percentile(times, 50), unit: 'ms', baseline: 'API server floor: create ConfigMap → watch event p50' },
      { suite: SUITE, name: `apply ApiDefinition → ConfigMap exists p99 (${APPLIES} applies)`, value: percentile(times, 99), unit: 'ms', baseline: 'API server floor: create ConfigMap → watch event p99' },
    ];
  } finally {
    await operator.stop();
  }
}

async function fromScratch(ctx: BenchContext, kc: KubeConfig, kubeconfig: string, redisUrl: string): Promise<BenchRow[]> {
  const core = kc.makeApiClient(CoreV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  const namespace = 'bench-scratch';
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  const apis = Array.from({ length: SCRATCH_APIS }, (_, i) => `scratch-${i}`);
  const create = (kind: keyof typeof kinds, body: Record<string, unknown>) => {
    const { group, version, plural } = kinds[kind];
    return custom.createNamespacedCustomObject({ group, version, namespace, plural, body: { apiVersion: `${group}/${version}`, kind, ...body } });
  };
  ctx.log(`creating ${SCRATCH_APIS} ApiDefinitions, ${POLICIES} Policies and ${SCRATCH_KEYS} Keys`);
  await inBatches(apis, 32, (name) => create('ApiDefinition', apiBody(name)));
  const perPolicy = Math.ceil(SCRATCH_APIS / POLICIES);
  await inBatches(Array.from({ length: POLICIES }, (_, p) => p), 10, (p) =>
    create('Policy', {
      metadata: { name: `plan-${p}` },
      spec: { rate: 10, per: 60, access_rights: Object.fromEntries(apis.slice(p * perPolicy, (p + 1) * perPolicy).map((id) => [id, {}])) },
    }),
  );
  const keysStarted = performance.now();
  await inBatches(Array.from({ length: SCRATCH_KEYS }, (_, k) => k), 64, (k) =>
    create('Key', { metadata: { name: `key-${k}` }, spec: { alias: `key-${k}`, apply_policies: [`plan-${k % POLICIES}`] } }),
  );
  // The API server's write rate, as this bench just met it creating the Keys: the operator
  // must make three writes per Key (its finalizer, its Secret, its status) and two per API
  // (the ConfigMap, the status), so at this rate that many writes take `floorSeconds`.
  const writesPerSecond = SCRATCH_KEYS / ((performance.now() - keysStarted) / 1000);
  const neededWrites = 3 * SCRATCH_KEYS + 2 * SCRATCH_APIS + POLICIES;
  const floorSeconds = neededWrites / writesPerSecond;
  ctx.log(`API server: ${writesPerSecond.toFixed(0)} creates/s at 64 in flight; the operator's ${neededWrites} writes need ${floorSeconds.toFixed(1)} s at that rate`);
  const path = (kind: 'ApiDefinition' | 'Key') => `/apis/${kinds[kind].group}/${kinds[kind].version}/namespaces/${namespace}/${kinds[kind].plural}`;
  // Watches, not lists, tell when the work is done: listing 10,000 Keys or 1,000 compiled
  // ConfigMaps every poll costs the API server (shared with the operator) more than the
  // watch events it sends anyway, and a list's own duration would add to the figure.
  const trackers = [
    await trackWatch(kc, path('ApiDefinition'), {}, isReady, SCRATCH_APIS),
    await trackWatch(kc, path('Key'), {}, isReady, SCRATCH_KEYS),
    await trackWatch(kc, `/api/v1/namespaces/${namespace}/configmaps`, { labelSelector: 'app.kubernetes.io/managed-by=gw-operator' }, () => true, 0),
  ] as const;
  const [apisReady, keysReady, configMaps] = trackers;
  const redis = new Redis(redisUrl);
  await redis.flushdb();
  const requestsBefore = await apiRequests(kubeconfig);
  const controlPlane = await ctx.controlPlanePids();
  const controlPlaneCpuBefore = cpuSeconds(controlPlane);
  const started = performance.now();
  const operator = await spawnOperator(kubeconfig, redisUrl, namespace);
  try {
    const deadline = Date.now() + (quick ? 120_000 : 900_000);
    for (;;) {
      // Done when every object shows Ready: a resync pass that starts later is steady-state work, not this.
      if (configMaps.count() === SCRATCH_APIS && apisReady.count() === SCRATCH_APIS && keysReady.count() === SCRATCH_KEYS && (await redis.dbsize()) === SCRATCH_KEYS) break;
      if (Date.now() > deadline) throw new Error(`not reconciled in time: ${configMaps.count()} ConfigMaps, ${apisReady.count()} APIs and ${keysReady.count()} Keys Ready`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - started) / 1000;
    // Which side is busy: the operator's CPU (its start included) and the API server's and etcd's, as shares of one core.
    const operatorCores = cpuSeconds([operator.child.pid!]) / seconds;
    const controlPlaneCores = (cpuSeconds(controlPlane) - controlPlaneCpuBefore) / seconds;
    const peak = operator.peakRssBytes() / (1024 * 1024);
    const metrics = await (await fetch(`http://127.0.0.1:${operator.healthPort}/metrics`)).text();
    const series = (name: string) => [...metrics.matchAll(new RegExp(`^${name}\\{kind="(\\w+)"[^}]*\\} ([\\d.]+)`, 'gm'))].map((m) => `${m[1]} ${Number(m[2]).toFixed(0)}`);
    ctx.log(`reconciles: ${series('gw_operator_reconciles_total').join(', ')}; seconds spent: ${series('gw_operator_reconcile_duration_seconds_sum').join(', ')}`);
    ctx.log(`from scratch: ${seconds.toFixed(1)} s, peak RSS ${peak.toFixed(0)} MiB; CPU meanwhile: operator ${operatorCores.toFixed(2)} of a core, API server + etcd ${controlPlaneCores.toFixed(2)}`);
    const gauge = (name: string) => (sampleValue(metrics, name) ?? 0) / (1024 * 1024);
    ctx.log(`V8 heap used ${gauge('gw_operator_nodejs_heap_size_used_bytes').toFixed(0)} of ${gauge('gw_operator_nodejs_heap_size_total_bytes').toFixed(0)} MiB, external ${gauge('gw_operator_nodejs_external_memory_bytes').toFixed(0)} MiB`);
    const requests = requestsBetween(requestsBefore, await apiRequests(kubeconfig));
    // Steady state: the backlog is done; what stays is the caches and what the heap kept.
    await new Promise((r) => setTimeout(r, STEADY_WAIT_MS));
    const steady = operator.rssBytes() / (1024 * 1024);
    ctx.log(`API requests during it (${requests.writes} writes): ${requests.lines.join(', ')}`);
    const floorName = `API server floor: the ${neededWrites} writes of that reconcile at the measured create rate`;
    return [
      { suite: SUITE, name: floorName, value: floorSeconds, unit: 's' },
      { suite: SUITE, name: `reconcile ${SCRATCH_APIS} ApiDefinitions + ${SCRATCH_KEYS} Keys from scratch`, value: seconds, unit: 's', baseline: floorName },
      { suite: SUITE, name: 'operator CPU during it', value: operatorCores, unit: 'cores' },
      { suite: SUITE, name: 'API server + etcd CPU during it', value: controlPlaneCores, unit: 'cores' },
      { suite: SUITE, name: 'peak RSS of the operator during it', value: peak, unit: 'MiB', baseline: 'RSS of an idle operator (no objects)' },
      { suite: SUITE, name: `RSS ${STEADY_WAIT_MS / 1000} s after it (steady state)`, value: steady, unit: 'MiB', baseline: 'RSS of an idle operator (no objects)' },
      { suite: SUITE, name: 'API writes per Key during it (all writes / Keys)', value: requests.writes / SCRATCH_KEYS, unit: 'writes' },
    ];
  } finally {
    for (const tracker of trackers) tracker.stop();
    await operator.stop();
    redis.disconnect();
  }
}

const suite: BenchSuite = async (ctx) => {
  const kubeconfig = await ctx.kubeconfig();
  const base = await ctx.redisUrl();
  // A database of its own, so counting sessions counts only this suite's.
  const redisUrl = `${base.replace(/\/\d*$/, '')}/7`;
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return [...(await applyLatency(ctx, kc, kubeconfig, redisUrl)), ...(await fromScratch(ctx, kc, kubeconfig, redisUrl))];
};

export default suite;
