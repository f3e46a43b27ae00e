/**
 * `npm run soak [-- --minutes N]`: a standalone sidecar (folder mode, Redis) under steady
 * mixed traffic while its config keeps changing (keys created through the admin operation
 * and deleted from the folder, a policy edited, APIs added and removed), for a set time
 * (default 10 minutes, GW_SOAK_MINUTES). Every `--sample-seconds` it records the sidecar's
 * RSS and heap, its event-loop delay, the number of Redis keys and its open sockets, and at
 * the end it fails when one of them still climbs over the last half of the run (see
 * trend.ts), when a request got a 5xx or no answer, or when a config change was refused.
 * The sidecar runs as its image runs it, from the bundle, on jemalloc, with the NODE_OPTIONS the
 * chart gives injected sidecars (sidecar.nodeOptions), or `--node-options` to try others ('' for
 * Node's own sizing).
 * Not part of `npm test`: it is long by design. Traffic stays on loopback.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, readlink, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { keyHash } from '../../crds/key-hash.ts';
import { bundleOnce } from '../../scripts/build/bundle.ts';
import { imageNodeFlags } from '../../scripts/images/build.ts';
import { startEchoUpstream } from '../../demo/upstream.ts';
import { jemallocEnv } from '../harness/install-image-host-files.ts';
import { freePort } from '../harness/ports.ts';
import { startRedisServer } from '../harness/redis.ts';
import { chartNodeOptions } from '../support/chart-node-options.ts';
import { sampleValue } from '../support/metric-sample.ts';
import { floors, judge, type Sample, type TrendLimit, type TrendVerdict } from './trend.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const ADMIN_SECRET = 'soak-admin-secret';
/** Keys alive at once: each new one retires the oldest. */
const LIVE_KEYS = 20;
/** Churned APIs alive at once. */
const LIVE_CHURN_APIS = 4;
const CHANGE_EVERY_MS = 2_000;
const MAX_IN_FLIGHT = 64;
/** The heap is read this often, and judged by its floor per minute (trend.ts floors). */
const HEAP_READ_EVERY_MS = 1_000;
const HEAP_FLOOR_WINDOW_SECONDS = 60;

const { values: args } = parseArgs({
  options: {
    minutes: { type: 'string', default: process.env.GW_SOAK_MINUTES ?? '10' },
    'sample-seconds': { type: 'string', default: '10' },
    rate: { type: 'string', default: '200' },
    'node-options': { type: 'string', default: chartNodeOptions('sidecar') },
    'max-rss-mib-per-min': { type: 'string', default: '1.5' },
    'max-heap-mib-per-min': { type: 'string', default: '1' },
    'max-redis-keys-per-min': { type: 'string', default: '20' },
    'max-sockets-per-min': { type: 'string', default: '2' },
  },
});

function positive(name: string, text: string): number {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number, got "${text}"`);
  return value;
}

const durationSeconds = positive('minutes', args.minutes) * 60;
const sampleSeconds = positive('sample-seconds', args['sample-seconds']);
const rate = positive('rate', args.rate);
const limits: Record<'rss' | 'heap' | 'redisKeys' | 'sockets', TrendLimit> = {
  rss: { name: 'RSS', unit: 'MiB', maxPerMinute: positive('max-rss-mib-per-min', args['max-rss-mib-per-min']) },
  heap: { name: 'heap in use', unit: 'MiB', maxPerMinute: positive('max-heap-mib-per-min', args['max-heap-mib-per-min']) },
  redisKeys: { name: 'Redis keys', unit: 'keys', maxPerMinute: positive('max-redis-keys-per-min', args['max-redis-keys-per-min']) },
  sockets: { name: 'open sockets', unit: 'sockets', maxPerMinute: positive('max-sockets-per-min', args['max-sockets-per-min']) },
};

const apiYaml = (id: string, listenPath: string, target: string, keyless: boolean, extra = ''): string => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${id} }
spec:
  api_id: ${id}
  name: ${id}
  use_keyless: ${keyless}
  proxy: { listen_path: ${listenPath}, target_url: '${target}', strip_listen_path: true }
  global_rate_limit: { rate: 150, per: 1 }
${extra}`;

const policyYaml = (rate: number): string => `apiVersion: gw.dev/v1alpha1
kind: Policy
metadata: { name: soak-plan }
spec:
  rate: ${rate}
  per: 10
  quota_max: -1
  access_rights:
    soak-keyed: { api_id: soak-keyed, api_name: soak-keyed }
`;

/** The folder a newcomer would write: a keyless API with a tight endpoint limit, a keyed API, and its policy. */
async function writeFolder(dir: string, upstream: string): Promise<void> {
  const limited = '  use_extended_paths: true\n  extended_paths:\n    rate_limit:\n      - { path: /limited, method: GET, rate: 5, per: 1 }\n';
  await writeFile(join(dir, 'keyless.yaml'), apiYaml('soak-keyless', '/keyless/', upstream, true, limited));
  await writeFile(join(dir, 'keyed.yaml'), apiYaml('soak-keyed', '/keyed/', upstream, false, '  auth: { auth_header_name: Authorization }\n'));
  await writeFile(join(dir, 'policy.yaml'), policyYaml(20));
}

interface Sidecar {
  child: ChildProcess;
  proxy: string;
  admin: string;
  health: string;
  exited(): boolean;
  stop(): Promise<void>;
}

async function startSidecar(dir: string, redisUrl: string): Promise<Sidecar> {
  const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
  const entry = await bundleOnce('sidecar');
  const allocator = await jemallocEnv();
  const child = spawn(
    process.execPath,
    [...imageNodeFlags('sidecar'), entry, '--config', dir, '--redis-url', redisUrl, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`],
    { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, GW_ADMIN_SECRET: ADMIN_SECRET, GW_LOG_LEVEL: 'warn', GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits', GW_WORKERS: '1', NODE_OPTIONS: args['node-options'], ...allocator }, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const sidecar: Sidecar = {
    child,
    proxy: `http://127.0.0.1:${listen}`,
    admin: `http://127.0.0.1:${admin}`,
    health: `http://127.0.0.1:${health}`,
    exited: () => child.exitCode !== null || child.signalCode !== null,
    stop: () =>
      new Promise((resolve) => {
        if (sidecar.exited()) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (sidecar.exited()) throw new Error('the sidecar exited at start');
    const ready = await fetch(`${sidecar.health}/readyz`).then((r) => r.ok, () => false);
    if (ready) return sidecar;
    if (Date.now() > deadline) throw new Error('the sidecar did not become ready in 30 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** What the traffic got, by status (0: no answer). */
class Tally {
  readonly byStatus = new Map<number, number>();
  total = 0;
  add(status: number): void {
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
    this.total += 1;
  }
  failures(): number {
    return [...this.byStatus].filter(([status]) => status === 0 || status >= 500).reduce((sum, [, n]) => sum + n, 0);
  }
  toString(): string {
    return [...this.byStatus].sort(([a], [b]) => a - b).map(([status, n]) => `${status === 0 ? 'no answer' : status}: ${n}`).join(', ');
  }
}

interface World {
  sidecar: Sidecar;
  dir: string;
  /** The echo upstream every API proxies to. */
  upstream: string;
  /** Raw keys alive now, oldest first. */
  keys: string[];
  /** Numbers of the churned APIs alive now, oldest first. */
  churnApis: number[];
  changeErrors: string[];
  changes: number;
  /** When the measured run began (Date.now()). */
  startedAt: number;
  /** The heap in use, read every HEAP_READ_EVERY_MS. */
  heapReadings: Sample[];
}

/** One request of the mix: most succeed, some are limited (429), refused (403) or meet a removed API (404). */
interface SoakRequest {
  url: string;
  init: { method?: 'GET' | 'POST'; headers?: Record<string, string>; body?: string };
}

function nextRequest(world: World): SoakRequest {
  const { proxy } = world.sidecar;
  const pick = Math.random();
  const anyKey = world.keys[Math.floor(Math.random() * world.keys.length)];
  if (pick < 0.3) return { url: `${proxy}/keyless/get`, init: {} };
  if (pick < 0.35) return { url: `${proxy}/keyless/limited`, init: {} };
  if (pick < 0.7 && anyKey) return { url: `${proxy}/keyed/items/${Math.floor(Math.random() * 100)}`, init: { headers: { authorization: anyKey } } };
  if (pick < 0.75 && anyKey) return { url: `${proxy}/keyed/upload`, init: { method: 'POST', headers: { authorization: anyKey, 'content-type': 'application/json' }, body: JSON.stringify({ blob: 'x'.repeat(1024) }) } };
  if (pick < 0.85) return { url: `${proxy}/keyed/get`, init: { headers: { authorization: 'not-a-key' } } };
  const api = world.churnApis[Math.floor(Math.random() * world.churnApis.length)] ?? 0;
  return { url: `${proxy}/churn-${api}/get`, init: {} };
}

/** Sends `rate` requests per second, at most MAX_IN_FLIGHT at once, until `until`. */
async function drive(world: World, tally: Tally, until: number): Promise<void> {
  const dispatcher = new Agent({ connections: MAX_IN_FLIGHT, keepAliveTimeout: 10_000 });
  const interval = 1000 / rate;
  let inFlight = 0;
  let next = performance.now();
  const pending = new Set<Promise<void>>();
  try {
    while (Date.now() < until && !world.sidecar.exited()) {
      next += interval;
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (inFlight >= MAX_IN_FLIGHT) continue;
      const { url, init } = nextRequest(world);
      inFlight += 1;
      const sent = request(url, { ...init, dispatcher, headersTimeout: 10_000, bodyTimeout: 10_000 })
        .then(async (res) => {
          await res.body.dump();
          tally.add(res.statusCode);
        })
        .catch(() => tally.add(0))
        .finally(() => {
          inFlight -= 1;
          pending.delete(sent);
        });
      pending.add(sent);
    }
    await Promise.all(pending);
  } finally {
    await dispatcher.close();
  }
}

async function createKey(world: World): Promise<void> {
  const res = await fetch(`${world.sidecar.admin}/admin/org/keys`, {
    method: 'POST',
    headers: { 'admin-auth': ADMIN_SECRET, 'content-type': 'application/json' },
    body: JSON.stringify({ alias: `soak-${world.changes}`, apply_policies: ['soak-plan'] }),
  });
  const body = (await res.json()) as { key_id?: string };
  if (res.status !== 200 || !body.key_id) throw new Error(`create key answered ${res.status}`);
  world.keys.push(body.key_id);
}

/** The admin operation writes `key-<Key name>.yaml`; the Key's name comes from its hash (sidecar/admin/create-key.ts). */
const keyFile = (dir: string, raw: string): string => join(dir, `key-key-${keyHash(raw).slice(0, 24)}.yaml`);

/** One round of config changes: a key in, the oldest out; now and then the policy edited and an API swapped. */
async function change(world: World): Promise<void> {
  world.changes += 1;
  await createKey(world);
  if (world.keys.length > LIVE_KEYS) await unlink(keyFile(world.dir, world.keys.shift()!));
  if (world.changes % 5 === 0) await writeFile(join(world.dir, 'policy.yaml'), policyYaml(world.changes % 10 === 0 ? 20 : 40));
  if (world.changes % 3 === 0) {
    const added = world.changes;
    await writeFile(join(world.dir, `churn-${added}.yaml`), apiYaml(`churn-${added}`, `/churn-${added}/`, world.upstream, true));
    world.churnApis.push(added);
    if (world.churnApis.length > LIVE_CHURN_APIS) await unlink(join(world.dir, `churn-${world.churnApis.shift()!}.yaml`));
  }
}

async function keepChanging(world: World, until: number): Promise<void> {
  while (Date.now() < until && !world.sidecar.exited()) {
    await change(world).catch((error: unknown) => world.changeErrors.push(error instanceof Error ? error.message : String(error)));
    await new Promise((r) => setTimeout(r, CHANGE_EVERY_MS));
  }
}

interface Measurement {
  at: number;
  rssMiB: number;
  /** The lowest heap in use read since the previous measurement. */
  heapMiB: number;
  loopDelayP99Ms: number;
  redisKeys: number;
  sockets: number;
  requests: number;
}

async function socketsOf(pid: number): Promise<number> {
  const fds = await readdir(`/proc/${pid}/fd`);
  const targets = await Promise.all(fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')));
  return targets.filter((t) => t.startsWith('socket:')).length;
}

async function sidecarMetric(world: World, name: string): Promise<number> {
  return sampleValue(await (await fetch(`${world.sidecar.health}/metrics`)).text(), name) ?? Number.NaN;
}

/** Reads the heap in use every HEAP_READ_EVERY_MS until `until`. */
async function readHeap(world: World, until: number): Promise<void> {
  while (Date.now() < until && !world.sidecar.exited()) {
    const bytes = await sidecarMetric(world, 'gw_sidecar_nodejs_heap_size_used_bytes').catch(() => Number.NaN);
    if (Number.isFinite(bytes)) world.heapReadings.push({ at: (Date.now() - world.startedAt) / 1000, value: bytes / 2 ** 20 });
    await new Promise((r) => setTimeout(r, HEAP_READ_EVERY_MS));
  }
}

async function measure(world: World, redis: Redis, tally: Tally, since: number): Promise<Measurement> {
  const pid = world.sidecar.child.pid!;
  const [status, loopDelayP99, redisKeys, sockets] = await Promise.all([
    readFile(`/proc/${pid}/status`, 'utf8'),
    sidecarMetric(world, 'gw_sidecar_nodejs_eventloop_lag_p99_seconds'),
    redis.dbsize(),
    socketsOf(pid),
  ]);
  const heapSince = world.heapReadings.filter((r) => r.at >= since).map((r) => r.value);
  return {
    at: Math.round((Date.now() - world.startedAt) / 1000),
    rssMiB: Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) / 1024,
    heapMiB: heapSince.length > 0 ? Math.min(...heapSince) : Number.NaN,
    loopDelayP99Ms: loopDelayP99 * 1000,
    redisKeys,
    sockets,
    requests: tally.total,
  };
}

function printSample(m: Measurement, previous: Measurement | undefined): void {
  const perSecond = (m.requests - (previous?.requests ?? 0)) / Math.max(1, m.at - (previous?.at ?? 0));
  console.log(
    `${String(m.at).padStart(5)} s  RSS ${m.rssMiB.toFixed(1).padStart(6)} MiB  heap floor ${m.heapMiB.toFixed(1).padStart(5)} MiB  loop p99 ${m.loopDelayP99Ms.toFixed(1).padStart(5)} ms  Redis keys ${String(m.redisKeys).padStart(5)}  sockets ${String(m.sockets).padStart(3)}  ${perSecond.toFixed(0)} req/s`,
  );
}

function printVerdicts(verdicts: TrendVerdict[]): void {
  console.log('\nover the last half of the run:');
  for (const v of verdicts) {
    const line = `  ${v.name.padEnd(13)} ${v.first.toFixed(1)} → ${v.last.toFixed(1)} ${v.unit}, slope ${v.perMinute.toFixed(2)} ${v.unit}/min (limit ${v.maxPerMinute})`;
    console.log(`${line}  ${v.ok ? 'ok' : 'GROWS'}`);
  }
}

async function main(): Promise<number> {
  console.log(`soak: ${durationSeconds / 60} min, ${rate} req/s, a sample every ${sampleSeconds} s; sidecar NODE_OPTIONS '${args['node-options']}'`);
  const redisServer = await startRedisServer();
  const upstream = await startEchoUpstream();
  const dir = await mkdtemp(join(tmpdir(), 'gw-soak-'));
  const redis = new Redis(redisServer.url);
  let sidecar: Sidecar | undefined;
  try {
    await writeFolder(dir, upstream.url);
    sidecar = await startSidecar(dir, redisServer.url);
    const world: World = { sidecar, dir, upstream: upstream.url, keys: [], churnApis: [], changeErrors: [], changes: 0, startedAt: Date.now(), heapReadings: [] };
    for (let i = 0; i < 5; i++) await createKey(world);
    const tally = new Tally();
    world.startedAt = Date.now();
    const until = world.startedAt + durationSeconds * 1000;
    const running = Promise.all([drive(world, tally, until), keepChanging(world, until), readHeap(world, until)]);
    const measurements: Measurement[] = [];
    while (Date.now() < until && !sidecar.exited()) {
      await new Promise((r) => setTimeout(r, Math.min(sampleSeconds * 1000, Math.max(0, until - Date.now()))));
      if (sidecar.exited()) break;
      const m = await measure(world, redis, tally, measurements.at(-1)?.at ?? 0);
      printSample(m, measurements.at(-1));
      measurements.push(m);
    }
    await running;
    const series = (pick: (m: Measurement) => number): Sample[] => measurements.map((m) => ({ at: m.at, value: pick(m) }));
    const verdicts = [
      judge(limits.rss, series((m) => m.rssMiB), durationSeconds),
      judge(limits.heap, floors(world.heapReadings, HEAP_FLOOR_WINDOW_SECONDS), durationSeconds),
      judge(limits.redisKeys, series((m) => m.redisKeys), durationSeconds),
      judge(limits.sockets, series((m) => m.sockets), durationSeconds),
    ];
    printVerdicts(verdicts);
    const maxLoop = Math.max(...measurements.map((m) => m.loopDelayP99Ms));
    console.log(`  event-loop delay p99: at most ${maxLoop.toFixed(1)} ms over the samples`);
    console.log(`\n${tally.total} requests (${tally.toString()}), ${world.changes} config changes, ${world.changeErrors.length} refused`);
    const problems = [
      ...verdicts.filter((v) => !v.ok).map((v) => `${v.name} grows ${v.perMinute.toFixed(2)} ${v.unit}/min over the last half (limit ${v.maxPerMinute})`),
      ...(sidecar.exited() ? ['the sidecar exited during the run'] : []),
      ...(tally.failures() > 0 ? [`${tally.failures()} requests got a 5xx or no answer`] : []),
      ...world.changeErrors.slice(0, 5).map((e) => `config change failed: ${e}`),
      ...(measurements.length < 4 ? ['too few samples to judge: run longer or sample more often'] : []),
    ];
    for (const problem of problems) console.error(`FAIL: ${problem}`);
    if (problems.length === 0) console.log('soak passed');
    return problems.length === 0 ? 0 : 1;
  } finally {
    await sidecar?.stop();
    redis.disconnect();
    await upstream.close();
    await redisServer.dispose();
    await rm(dir, { recursive: true, force: true });
  }
}

process.exitCode = await main().catch((error: unknown) => {
  console.error(error);
  return 1;
});
