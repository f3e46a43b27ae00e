/**
 * Proxy throughput and latency (issue 5 benchmark): the same echo upstream called
 * directly, through a bare undici forwarder with no gateway logic, through that forwarder
 * with one Redis script call per event-loop turn in front of it (the Redis floor), through
 * nginx with a limit_req (a C peer), and through the sidecar (keyless API; auth-token API
 * with the sliding log in Redis) with each forwarder. Each server runs in its own process;
 * the C load generator's closed loop drives them one after another in this run (three
 * interleaved rounds, or BENCH_ROUNDS; medians kept), so the ratios compare like with like.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { keyHash } from '../../../crds/key-hash.ts';
import { imageNodeFlags } from '../../../scripts/images/build.ts';
import { freePort } from '../../harness/ports.ts';
import { startNginx, type RunningNginx } from '../nginx.ts';
import { cpuRatioOverRounds, httpRounds, measureRounds, ratioOverRounds, REPO_ROOT, rowsOf, SIDECAR_NODE_OPTIONS, spawnEchoUpstream, spawnNode, startSidecarProcess, stopChild, twinsOf, waitFor, type Target } from '../http-load.ts';
import { againstRowName, type Revision } from '../revision.ts';
import type { BenchContext, BenchSuite } from '../types.ts';

/** The proxy rows' baseline: the gateway's own forwarder with nothing of the gateway around it. */
export const BARE = 'bare undici forwarder';

const forwarderScript = (upstream: string): string => `
import { createServer } from 'node:http';
import { clientGone } from '${REPO_ROOT}sidecar/proxy/forwarder.ts';
import { UndiciForwarder } from '${REPO_ROOT}sidecar/proxy/undici-forwarder.ts';
const f = new UndiciForwarder({ timeoutMs: () => 30000, maxBodyBytes: () => 1e7 });
const forward = (req, res) => void f.forward({ req, res, origin: '${upstream}', path: req.url, rateHeaders: null, answerHeaders: {}, signal: clientGone(res) });`;

const bareScript = (port: number, upstream: string): string => `${forwarderScript(upstream)}
createServer(forward).listen(${port}, '127.0.0.1');`;

/** The floor under any exact limit shared through Redis: the bare forwarder behind one Redis round trip. */
export const REDIS_FLOOR = 'Redis floor: bare undici forwarder after one Redis call per loop turn';

/** A sidecar row whose limit counts in Redis: the rows the Redis floor is the least cost of. */
export const limitedInRedis = (target: Target): boolean => target.cpu?.redis !== undefined && target.name !== REDIS_FLOOR;

/**
 * The Redis floor's server: what the auth-token row's limit costs at the least, with none of
 * the gateway's logic. Each event-loop turn's requests wait for one script call, as the
 * sidecar's store sends them (docs/architecture.md#performance), and the script does the
 * sliding log's per-request command (ZADD) on one log, trimmed, counted and given its expiry
 * once per call, as limits.lua does for a log a call meets again. A failed call answers 503,
 * which the bench counts as an error.
 */
const redisFloorScript = (port: number, upstream: string, redisUrl: string): string => `${forwarderScript(upstream)}
import { Redis } from 'ioredis';
const redis = new Redis('${redisUrl}');
redis.defineCommand('slidingLog', {
  numberOfKeys: 1,
  lua: "local now = tonumber(ARGV[1]) redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 1000) redis.call('PEXPIRE', KEYS[1], 1000) local count = redis.call('ZCARD', KEYS[1]) local counts = {} for i = 2, #ARGV do counts[i - 1] = count count = count + redis.call('ZADD', KEYS[1], now, ARGV[i]) end return counts",
});
let waiting = [];
let sequence = 0;
const call = () => {
  const batch = waiting;
  waiting = [];
  redis.slidingLog('bench:redis-floor', Date.now(), ...batch.map(() => String(sequence++))).then(
    () => { for (const [req, res] of batch) forward(req, res); },
    () => { for (const [, res] of batch) res.writeHead(503).end(); },
  );
};
createServer((req, res) => {
  if (waiting.length === 0) setImmediate(call);
  waiting.push([req, res]);
}).listen(${port}, '127.0.0.1');`;

/**
 * How many keys the fleet row spreads its requests over, in turn: enough that each key comes
 * back only every second or two at this row's rate, as most keys of a real fleet do, where the
 * auth-token row's one key is always hot; and few enough that all of them fit the sidecar's
 * session cache (10,000 sessions) beside that key, since requests in turn over more keys than
 * a cache holds miss it every time, whatever it keeps (docs/benchmarks.md#the-fleet-row).
 */
export const FLEET_KEYS = 5_000;

/** The fleet row's raw keys: `prefix-0` to `prefix-(n-1)`, the load generator's `{i}` filled in. */
const fleetKey = (prefix: string, i: number | '{i}'): string => `${prefix}-${i}`;

/** A Key for the auth-token API whose limit is never reached. */
const benchKey = (name: string, hash: string): string => `apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: ${name} }
spec:
  key_hash: ${hash}
  rate: 1000000000
  per: 1
  access_rights: { bench-auth: { api_id: bench-auth, api_name: bench auth } }
`;

/** The fleet row's Keys, one per raw key of `fleetKey`. */
export function fleetResources(prefix: string): string {
  return Array.from({ length: FLEET_KEYS }, (_, i) => benchKey(`bench-fleet-${i}`, keyHash(fleetKey(prefix, i)))).join('---\n');
}

/**
 * A keyless API, the same with a stream rate-limit resource that is never reached, and an
 * auth-token API on `upstream`, and a Key for the latter whose limit is never reached.
 */
export function benchResources(upstream: string, hash: string): string {
  return `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: bench-keyless }
spec: { api_id: bench-keyless, name: bench keyless, use_keyless: true, proxy: { listen_path: /keyless/, target_url: '${upstream}', strip_listen_path: true } }
---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: bench-stream }
spec:
  api_id: bench-stream
  name: bench stream
  use_keyless: true
  proxy: { listen_path: /stream/, target_url: '${upstream}', strip_listen_path: true, rate_limit: guard }
  rate_limit_resources: [{ label: guard, local: { count: 2000000000, interval: 1s } }]
---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: bench-auth }
spec: { api_id: bench-auth, name: bench auth, use_keyless: false, proxy: { listen_path: /auth/, target_url: '${upstream}', strip_listen_path: true } }
---
${benchKey('bench-key', hash)}`;
}

/** The redis-server process behind `url`, whose CPU time the limited rows count. */
async function redisProcessId(url: string): Promise<number> {
  const redis = new Redis(url);
  try {
    const pid = /process_id:(\d+)/.exec(await redis.info('server'))?.[1];
    if (pid === undefined) throw new Error('INFO server did not name the process id');
    return Number(pid);
  } finally {
    redis.disconnect();
  }
}

/** The proxy rows' servers, started; `stop` ends them all. */
export interface ProxyTargets {
  targets: Target[];
  stop(): Promise<void>;
}

/**
 * The echo upstream, the bare undici forwarder, nginx, and a sidecar per forwarder (a
 * keyless row and an auth-token + sliding log row each), every one in its own process.
 */
export async function startProxyTargets(ctx: BenchContext, forwarders: readonly string[]): Promise<ProxyTargets> {
  const [upstreamPort, barePort, floorPort] = await Promise.all([freePort(), freePort(), freePort()]);
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  const bare = spawnNode(['--input-type=module', '-e', bareScript(barePort, upstreamUrl)]);
  const children = [spawnEchoUpstream(upstreamPort), bare];
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-'));
  const rawKey = randomBytes(16).toString('hex');
  let nginx: RunningNginx | undefined;
  const stop = async (): Promise<void> => {
    await Promise.all([...children.map(stopChild), nginx?.stop()]);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await writeFile(join(dir, 'bench.yaml'), benchResources(upstreamUrl, keyHash(rawKey)));
    await writeFile(join(dir, 'fleet.yaml'), fleetResources(rawKey));
    await Promise.all([waitFor(`${upstreamUrl}/`), waitFor(`http://127.0.0.1:${barePort}/`)]);
    const redisUrl = await ctx.redisUrl();
    const redisPid = await redisProcessId(redisUrl);
    const floor = spawnNode(['--input-type=module', '-e', redisFloorScript(floorPort, upstreamUrl, redisUrl)]);
    children.push(floor);
    await waitFor(`http://127.0.0.1:${floorPort}/`);
    const targets: Target[] = [
      { name: 'upstream direct', url: `${upstreamUrl}/bench` },
      { name: BARE, url: `http://127.0.0.1:${barePort}/bench`, baseline: 'upstream direct', cpu: { proxy: [bare.pid!] } },
      { name: REDIS_FLOOR, url: `http://127.0.0.1:${floorPort}/bench`, baseline: BARE, cpu: { proxy: [floor.pid!], redis: [redisPid] } },
    ];
    nginx = await startNginx(upstreamUrl, 1);
    ctx.log(`sidecars run as their image runs them: node ${imageNodeFlags('sidecar').join(' ')}, NODE_OPTIONS '${SIDECAR_NODE_OPTIONS}', on jemalloc`);
    if (ctx.against !== undefined) ctx.log(`${ctx.against.label}'s sidecars run as its image runs them: node ${ctx.against.sidecar.nodeFlags.join(' ')}, NODE_OPTIONS '${ctx.against.sidecar.nodeOptions}', on jemalloc`);
    targets.push({ name: 'nginx proxy_pass + limit_req, 1 worker', url: `${nginx.url}/bench`, baseline: BARE, cpu: { proxy: nginx.pids } });
    /** One forwarder's sidecar rows, from a sidecar process of this tree's or of `revision`'s (its rows named after this tree's). */
    const sidecarTargets = async (forwarder: string, revision?: Revision): Promise<Target[]> => {
      // The auth row shows the rate limit's X-RateLimit-* headers on every answer (docs/benchmarks.md#proxy).
      const env = { GW_FORWARDER: forwarder, GW_ENABLE_REDIS_ROLLING_LIMITER: 'true', GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' };
      const sidecar = await startSidecarProcess(dir, { redisUrl, env, readyTimeoutMs: 60_000, build: revision?.sidecar });
      children.push(sidecar.child);
      const named = (name: string): Pick<Target, 'name' | 'twinOf'> => (revision === undefined ? { name } : { name: againstRowName(name, revision), twinOf: name });
      const baseline = BARE;
      const proxy = [sidecar.child.pid!];
      const rows: Target[] = [
        { ...named(`sidecar keyless (${forwarder})`), url: `${sidecar.base}/keyless/bench`, baseline, cpu: { proxy } },
        {
          ...named(`sidecar auth-token + sliding log (${forwarder})`),
          url: `${sidecar.base}/auth/bench`,
          baseline,
          headers: { authorization: rawKey },
          cpu: { proxy, redis: [redisPid] },
        },
      ];
      if (forwarder !== 'undici') return rows;
      rows.push({
        ...named(`sidecar auth-token + sliding log, ${FLEET_KEYS.toLocaleString('en')} keys in turn (${forwarder})`),
        url: `${sidecar.base}/auth/bench`,
        baseline,
        headers: { authorization: fleetKey(rawKey, '{i}') },
        rotate: FLEET_KEYS,
        cpu: { proxy, redis: [redisPid] },
      });
      return rows;
    };
    for (const forwarder of forwarders) {
      const ours = await sidecarTargets(forwarder);
      const theirs = ctx.against === undefined ? [] : await sidecarTargets(forwarder, ctx.against);
      // Each row of the other revision right after this tree's: the two are measured one after the other, taking turns going first (measureRounds).
      targets.push(...ours.flatMap((target, i) => [target, ...theirs.slice(i, i + 1)]));
    }
    return { targets, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

const proxySuite: BenchSuite = async (ctx) => {
  const { targets, stop } = await startProxyTargets(ctx, ['undici', 'http-proxy']);
  try {
    const rounds = await measureRounds(ctx, targets, httpRounds(ctx));
    const rows = targets.flatMap((t) => rowsOf('proxy', t, rounds));
    for (const t of targets.filter((t) => t.name.startsWith('sidecar'))) {
      const ratio = ratioOverRounds(rounds, t.name, 'upstream direct');
      rows.push({ suite: 'proxy', name: `${t.name} vs direct`, value: ratio.ratio, unit: 'ratio', baseline: 'upstream direct', ...ratio });
    }
    // Issue 13's "the limited path costs at most 20%" read as cost: the proxy's CPU per request.
    for (const t of targets.filter((t) => t.baseline === BARE)) {
      const ratio = cpuRatioOverRounds(rounds, t.name, BARE, 'proxy');
      rows.push({ suite: 'proxy', name: `${t.name}: proxy CPU per request, the bare forwarder's / this row's`, value: ratio.ratio, unit: 'ratio', baseline: BARE, ...ratio });
    }
    // What the limited rows spend beyond the Redis round trip that any exact shared limit pays.
    for (const t of targets.filter(limitedInRedis)) {
      const ratio = cpuRatioOverRounds(rounds, t.name, REDIS_FLOOR, 'proxy');
      rows.push({ suite: 'proxy', name: `${t.name}: proxy CPU per request, the Redis floor's / this row's`, value: ratio.ratio, unit: 'ratio', baseline: REDIS_FLOOR, ...ratio });
    }
    // --against: each row against the other revision's build of it, round by round (1.05: this tree's 5% better).
    const { against } = ctx;
    if (against !== undefined) {
      for (const [t, twin] of twinsOf(targets)) {
        const rate = ratioOverRounds(rounds, t.name, twin);
        rows.push({ suite: 'proxy', name: `${t.name} vs ${against.label}`, value: rate.ratio, unit: 'ratio', baseline: twin, ...rate });
        const cpu = cpuRatioOverRounds(rounds, t.name, twin, 'proxy');
        rows.push({ suite: 'proxy', name: `${t.name}: proxy CPU per request, ${against.label}'s / this tree's`, value: cpu.ratio, unit: 'ratio', baseline: twin, ...cpu });
      }
    }
    return rows;
  } finally {
    await stop();
  }
};

export default proxySuite;
