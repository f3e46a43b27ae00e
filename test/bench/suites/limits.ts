/**
 * Rate-limit engine throughput (issue 4 benchmark): decisions per second of one process
 * for each algorithm against the run's Redis, with every request meeting an API-level
 * limit and a key-level limit (and a quota, except in the first DRL row, which shows the
 * DRL's own path: no Redis at all); Redis work per decision from INFO commandstats;
 * and `redis-benchmark` PING throughput on the same Redis in the same run as the ceiling.
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

const run = promisify(execFile);
const SUITE = 'limits';
const CEILING = 'redis PING (redis-benchmark)';
const IN_FLIGHT = 64;
const KEYS = 256;

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

async function commandStats(redis: Redis): Promise<{ total: number; evalsha: number }> {
  const info = await redis.info('commandstats');
  let total = 0;
  let evalsha = 0;
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (m[1] === 'info') continue;
    total += Number(m[2]);
    if (m[1] === 'evalsha') evalsha = Number(m[2]);
  }
  return { total, evalsha };
}

async function measure(
  ctx: BenchContext,
  url: string,
  name: string,
  settings: Partial<GatewaySettings>,
  quota: boolean,
): Promise<{ perSecond: number; commands: number; evalsha: number }> {
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
      Array.from({ length: IN_FLIGHT }, async (_, w) => {
        for (let i = w; performance.now() < until; i += IN_FLIGHT) {
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
      evalsha: (after.evalsha - before.evalsha) / decisions,
    };
  } finally {
    await engine.close();
    redis.disconnect();
    observer.disconnect();
  }
}

const suite: BenchSuite = async (ctx) => {
  const url = await ctx.redisUrl();
  const port = new URL(url).port;
  const rows: BenchRow[] = [];
  const ceiling = await pingCeiling(port, ctx.durationMs);
  rows.push({ suite: SUITE, name: CEILING, value: ceiling, unit: 'req/s' });
  for (const [name, settings, quota] of algorithms) {
    ctx.log(`measuring ${name}`);
    const figures = await measure(ctx, url, name, settings, quota);
    rows.push(
      { suite: SUITE, name: `${name}: decisions`, value: figures.perSecond, unit: 'decisions/s', baseline: CEILING, ratio: figures.perSecond / ceiling },
      { suite: SUITE, name: `${name}: EVALSHA per decision`, value: figures.evalsha, unit: 'calls' },
      { suite: SUITE, name: `${name}: Redis commands per decision (script-internal included)`, value: figures.commands, unit: 'commands' },
    );
  }
  return rows;
};

export default suite;
