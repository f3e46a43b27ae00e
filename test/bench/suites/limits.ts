/**
 * Rate-limit engine throughput (issue 4 benchmark): decisions per second of one process
 * for each algorithm against the run's Redis, with every request meeting an API-level
 * limit and a key-level limit (and a quota, except in the first DRL row, which shows the
 * DRL's own path: no Redis at all); Redis work per decision from INFO commandstats;
 * and `redis-benchmark` PING throughput on the same Redis in the same run as the ceiling.
 * Then a gateway at low load, one decision per call as most sidecars of a fleet send them:
 * Redis's time in the limit script per decision, as a Redis Function and, on a second Redis
 * whose FUNCTION command is renamed away, by EVALSHA (the baseline).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { createLogger } from '../../../common/logger.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { createLimitBackends } from '../../../sidecar/limits/backends.ts';
import { createLimitEngine } from '../../../sidecar/limits/engine.ts';
import { sidecarRedisOptions } from '../../../sidecar/redis.ts';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import type { BenchContext, BenchRow, BenchSuite } from '../types.ts';
import { startRedisServer } from '../../harness/redis.ts';
import { median, overRounds, roundCount } from '../http-load.ts';

const run = promisify(execFile);
const SUITE = 'limits';
const CEILING = 'redis PING (redis-benchmark)';
const IN_FLIGHT = 64;
const KEYS = 256;
const ONE_PER_CALL = 'sliding_log + quota, one decision per call';

/** [row name, settings, whether the key has a quota (which always needs the store)]. */
const algorithms: [string, Partial<GatewaySettings>, boolean][] = [
  ['drl, no quota', {}, false],
  ['drl + quota', {}, true],
  ['sliding_log + quota', { enable_redis_rolling_limiter: true }, true],
  ['sentinel + quota', { enable_sentinel_rate_limiter: true }, true],
  ['sentinel non-transactional + quota', { enable_sentinel_rate_limiter: true, enable_non_transactional_rate_limiter: true }, true],
  ['fixed_window + quota', { enable_fixed_window_rate_limiter: true }, true],
];

async function pingCeiling(port: string, durationMs: number): Promise<number> {
  const n = Math.max(20_000, Math.round(durationMs * 20));
  const { stdout } = await run('redis-benchmark', ['-p', port, '-t', 'ping', '-n', String(n), '-q']);
  const rates = [...stdout.matchAll(/PING_\w+: ([\d.]+) requests per second/g)].map((m) => Number(m[1]));
  if (rates.length === 0) throw new Error(`unexpected redis-benchmark output: ${stdout}`);
  return Math.max(...rates);
}

/**
 * Commands Redis ran, and of them the limit script's calls (FCALL, or EVALSHA where functions
 * are unavailable) and the time Redis spent in them, the commands they ran included.
 */
async function commandStats(redis: Redis): Promise<{ total: number; scriptCalls: number; scriptUs: number }> {
  const info = await redis.info('commandstats');
  let total = 0;
  let scriptCalls = 0;
  let scriptUs = 0;
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (m[1] === 'info') continue;
    total += Number(m[2]);
    if (m[1] === 'fcall' || m[1] === 'evalsha') {
      scriptCalls += Number(m[2]);
      scriptUs += Number(m[3]);
    }
  }
  return { total, scriptCalls, scriptUs };
}

/** One measurement: an algorithm's settings, whether the key has a quota, and how many decisions are in flight at once. */
interface Measurement {
  name: string;
  settings: Partial<GatewaySettings>;
  quota: boolean;
  inFlight: number;
}

async function measure(ctx: BenchContext, url: string, { name, settings, quota, inFlight }: Measurement): Promise<{ perSecond: number; commands: number; scriptCalls: number; scriptUs: number }> {
  // The sidecar's client options (docs/architecture.md#performance), so the figures are the sidecar's.
  const redis = new Redis(url, sidecarRedisOptions(2000));
  const observer = new Redis(url);
  const a = api(`bench-${name.replace(/\W/g, '-')}`, { api_limit: { rate: 10_000_000, per: 1 } });
  const p = policy('bench', { rate: { rate: 10_000_000, per: 1 }, quota_max: quota ? 1_000_000_000 : -1, quota_renewal_rate: 3600 });
  const logger = createLogger('bench', 'silent');
  const engine = createLimitEngine({
    config: config({ settings, apis: [a], policies: [p] }),
    backends: createLimitBackends({ redis, instanceId: 'bench', logger }),
    events: { emit: () => undefined },
    logger,
  });
  const requests = Array.from({ length: KEYS }, (_, i) =>
    request(a, { session: session({ apply_policies: ['bench'] }), raw: `bench-key-${i}` }),
  );
  try {
    await Promise.all(requests.map((r) => engine.decide(r)));
    const before = await commandStats(observer);
    let decisions = 0;
    const started = performance.now();
    const until = started + ctx.durationMs;
    await Promise.all(
      Array.from({ length: inFlight }, async (_, w) => {
        for (let i = w; performance.now() < until; i += inFlight) {
          await engine.decide(requests[i % KEYS]!);
          decisions++;
        }
      }),
    );
    const elapsed = (performance.now() - started) / 1000;
    const after = await commandStats(observer);
    return {
      perSecond: decisions / elapsed,
      commands: (after.total - before.total) / decisions,
      scriptCalls: (after.scriptCalls - before.scriptCalls) / decisions,
      scriptUs: (after.scriptUs - before.scriptUs) / decisions,
    };
  } finally {
    await engine.close();
    redis.disconnect();
    observer.disconnect();
  }
}

/**
 * Redis's script time per decision for sliding log + quota, one decision per call: as a
 * Redis Function on the run's Redis, against EVALSHA on a Redis without FUNCTION, in
 * interleaved rounds (which goes first alternates), each ratio taken within its round.
 */
async function oneDecisionPerCall(ctx: BenchContext, url: string): Promise<BenchRow[]> {
  const name = ONE_PER_CALL;
  const measurement: Measurement = { name, settings: { enable_redis_rolling_limiter: true }, quota: true, inFlight: 1 };
  const withoutFunctions = await startRedisServer({ settings: ['--rename-command', 'FUNCTION', ''] });
  const byScript: number[] = [];
  const byFunction: number[] = [];
  try {
    for (let round = 0; round < roundCount(5); round++) {
      ctx.log(`measuring ${name}, round ${round + 1}: by EVALSHA and as a function`);
      const script = (): Promise<number> => measure(ctx, withoutFunctions.url, measurement).then((f) => f.scriptUs);
      const fn = (): Promise<number> => measure(ctx, url, measurement).then((f) => f.scriptUs);
      if (round % 2 === 0) {
        byScript.push(await script());
        byFunction.push(await fn());
      } else {
        byFunction.push(await fn());
        byScript.push(await script());
      }
    }
  } finally {
    await withoutFunctions.dispose();
  }
  const baseline = `${name}, by EVALSHA (Redis without FUNCTION): Redis script time per decision`;
  return [
    { suite: SUITE, name: baseline, value: median(byScript), unit: 'µs' },
    {
      suite: SUITE,
      name: `${name}, as a Redis Function: Redis script time per decision`,
      value: median(byFunction),
      unit: 'µs',
      baseline,
      ...overRounds(byFunction.map((us, i) => us / byScript[i]!)),
    },
  ];
}

const suite: BenchSuite = async (ctx) => {
  const url = await ctx.redisUrl();
  const port = new URL(url).port;
  const rows: BenchRow[] = [];
  const ceiling = await pingCeiling(port, ctx.durationMs);
  rows.push({ suite: SUITE, name: CEILING, value: ceiling, unit: 'req/s' });
  for (const [name, settings, quota] of algorithms) {
    ctx.log(`measuring ${name}`);
    const figures = await measure(ctx, url, { name, settings, quota, inFlight: IN_FLIGHT });
    rows.push(
      { suite: SUITE, name: `${name}: decisions`, value: figures.perSecond, unit: 'decisions/s', baseline: CEILING, ratio: figures.perSecond / ceiling },
      { suite: SUITE, name: `${name}: script calls per decision`, value: figures.scriptCalls, unit: 'calls' },
      { suite: SUITE, name: `${name}: Redis commands per decision (script-internal included)`, value: figures.commands, unit: 'commands' },
    );
  }
  rows.push(...(await oneDecisionPerCall(ctx, url)));
  return rows;
};

export default suite;
