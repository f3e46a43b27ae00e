/**
 * Redis round trips per rate-limit decision on each topology GW_REDIS_URL can name: one
 * server, a Sentinel-managed master, a 3-master Cluster. Read from Redis itself (MONITOR
 * on every data node, see test/support/round-trips.ts): every call of limits.lua (FCALL, or EVALSHA), grouped
 * by decision and into the waves the gateway must wait between. Each Cluster and Sentinel
 * row is compared with the same scenario on one server.
 */
import type { Cluster, Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../../common/logger.ts';
import { createRedisClient } from '../../../common/redis-url.ts';
import { createLimitBackends } from '../../../sidecar/limits/backends.ts';
import { createLimitEngine } from '../../../sidecar/limits/engine.ts';
import { sidecarRedisOptions } from '../../../sidecar/redis.ts';
import { startRedisCluster, startRedisSentinel } from '../../harness/index.ts';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { measureRoundTrips, type NodeAddress } from '../../support/round-trips.ts';
import type { BenchContext, BenchRow, BenchSuite } from '../types.ts';

const SUITE = 'round-trips';
const IN_FLIGHT = 16;

/** [name, the key's own rate, whether it has a quota]; the API limit never refuses. */
const scenarios: [string, number, boolean][] = [
  ['API + key limit + quota', 10_000_000, true],
  ['API + key limit, no quota', 10_000_000, false],
  ['refused by the key limit', 1, true],
];

async function ready(redis: Redis | Cluster): Promise<void> {
  for (let waited = 0; redis.status !== 'ready'; waited += 50) {
    if (waited > 10_000) throw new Error(`redis not ready (status ${redis.status})`);
    await sleep(50);
  }
}

interface Topology {
  name: string;
  url: string;
  nodes: NodeAddress[];
}

async function measure(ctx: BenchContext, { name: topology, url, nodes }: Topology, scenario: string, keyRate: number, quota: boolean) {
  const name = `${topology}-${scenario}`;
  const redis = createRedisClient(url, sidecarRedisOptions(3000));
  const instanceId = `bench-rtt-${Date.now()}`;
  const a = api(`bench-rtt-${name.replace(/\W/g, '-')}-${Date.now()}`, { api_limit: { rate: 10_000_000, per: 60 } });
  const p = policy('bench', { rate: { rate: keyRate, per: 60 }, quota_max: quota ? 1_000_000_000 : -1, quota_renewal_rate: 3600 });
  const logger = createLogger('bench', 'silent');
  const engine = createLimitEngine({
    config: config({ settings: { enable_redis_rolling_limiter: true, redis_timeout_ms: 3000 }, apis: [a], policies: [p] }),
    backends: createLimitBackends({ redis, instanceId, logger }),
    events: { emit: () => undefined },
    logger,
  });
  try {
    await ready(redis);
    const req = request(a, { session: session({ apply_policies: ['bench'] }), raw: `bench-rtt-key-${name}` });
    // Loads the script, and with a key rate of 1 uses the key's allowance up.
    await engine.decide(req);
    // Figures per decision: the count only has to be large; it follows the run's budget (1,000, or 200 quick).
    return await measureRoundTrips({ engine, instanceId, request: req, decisions: Math.round(ctx.durationMs / 5), inFlight: IN_FLIGHT, nodes });
  } finally {
    await engine.close();
    redis.disconnect();
  }
}

const suite: BenchSuite = async (ctx) => {
  const localhost = (port: number): NodeAddress => ({ host: '127.0.0.1', port });
  const standaloneUrl = await ctx.redisUrl();
  ctx.log('starting a Sentinel set and a 3-master Cluster');
  const [sentinel, cluster] = await Promise.all([startRedisSentinel(), startRedisCluster()]);
  const rows: BenchRow[] = [];
  try {
    const topologies: Topology[] = [
      { name: 'standalone', url: standaloneUrl, nodes: [localhost(Number(new URL(standaloneUrl).port))] },
      { name: 'sentinel', url: sentinel.url, nodes: [localhost(await sentinel.masterPort())] },
      { name: 'cluster', url: cluster.url, nodes: cluster.ports.map(localhost) },
    ];
    for (const [scenario, keyRate, quota] of scenarios) {
      for (const target of topologies) {
        const topology = target.name;
        ctx.log(`measuring ${topology}: ${scenario}`);
        const figures = await measure(ctx, target, scenario, keyRate, quota);
        if (figures.outOfOrder > 0) throw new Error(`${topology}, ${scenario}: ${figures.outOfOrder} decisions reached Redis out of wave order`);
        const baseline = topology === 'standalone' ? undefined : `standalone, ${scenario}: round trips per decision`;
        rows.push(
          { suite: SUITE, name: `${topology}, ${scenario}: round trips per decision`, value: figures.roundTripsPerDecision, unit: 'round trips', baseline },
          { suite: SUITE, name: `${topology}, ${scenario}: script calls per decision`, value: figures.scriptCallsPerDecision, unit: 'calls' },
        );
      }
    }
  } finally {
    await Promise.all([sentinel.dispose(), cluster.dispose()]);
  }
  return rows;
};

export default suite;
