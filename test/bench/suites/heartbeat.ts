/**
 * The DRL heartbeat of a gateway serving 5,000 APIs (the admin gateway with GW_APIS=*; the
 * DRL is the default algorithm), in the bench's process against the run's Redis, with the
 * sidecar's Redis client: gw's beat, and as the baseline what gw did before, a MULTI of four
 * commands per API all sent at once. Rows: the time a beat takes and the longest the event
 * loop waits for a turn while it runs (how long a request in flight waits on it), and, in a
 * run of its own, the CPU it costs this process. A gateway beats every 2 s. Interleaved
 * rounds in alternating order, medians kept.
 */
import { Redis } from 'ioredis';
import { gatewayHeartbeatKey } from '../../../common/redis-keys.ts';
import { GatewayHeartbeat } from '../../../sidecar/limits/heartbeat.ts';
import { sidecarRedisOptions } from '../../../sidecar/redis.ts';
import { median, overRounds } from '../http-load.ts';
import { cpuOf, timedInLoop, type LoopTiming } from '../loop-wait.ts';
import type { BenchRow, BenchSuite } from '../types.ts';

const SUITE = 'heartbeat';
const APIS = 5_000;
const ROUNDS = 7;
/** The sidecar's beat period, whose three make a member's TTL. */
const INTERVAL_MS = 2_000;

/** The beat gw sent before, as it was: per API, a MULTI renewing the member, dropping the expired, setting the expiry and reading the live. */
async function multiPerApi(redis: Redis, apis: readonly string[], instanceId: string): Promise<Map<string, Set<string>>> {
  const nowMs = Date.now();
  const ttlMs = INTERVAL_MS * 3;
  const beats = apis.map(async (api) => {
    const key = gatewayHeartbeatKey(api);
    const replies = await redis
      .multi()
      .zadd(key, nowMs + ttlMs, instanceId)
      .zremrangebyscore(key, '-inf', nowMs)
      .pexpire(key, ttlMs)
      .zrangebyscore(key, `(${nowMs}`, '+inf')
      .exec();
    const members = replies?.[3]?.[1];
    return [api, new Set(Array.isArray(members) ? (members as string[]) : [instanceId])] as const;
  });
  return new Map(await Promise.all(beats));
}

const heartbeatSuite: BenchSuite = async (ctx) => {
  const redis = new Redis(await ctx.redisUrl(), sidecarRedisOptions(10_000));
  try {
    const run = Date.now().toString(36);
    const apis = Array.from({ length: APIS }, (_, i) => `bench-beat-${run}-${i}`);
    const failures: unknown[] = [];
    const heartbeat = new GatewayHeartbeat({
      redis,
      instanceId: 'bench-gw',
      intervalMs: INTERVAL_MS,
      now: Date.now,
      reporter: { failed: (error) => failures.push(error), succeeded: () => undefined },
    });
    heartbeat.configure({ redis_timeout_ms: 10_000 } as Parameters<GatewayHeartbeat['configure']>[0]);
    heartbeat.serve(apis);
    const ways = {
      'a MULTI per API, all at once (before)': () => multiPerApi(redis, apis, 'bench-gw-before'),
      'gw: 100 sets per script call and per turn': () => heartbeat.beat(),
    };
    type Measured = LoopTiming & { cpuMs: number };
    const results = new Map<string, Measured[]>(Object.keys(ways).map((way) => [way, []]));
    // Each way once before the measured rounds: scripts loaded, sets created, code warm.
    for (const beat of Object.values(ways)) await beat();
    for (let round = 0; round < ROUNDS; round++) {
      // Taking turns first: the collection of what one way left behind falls on either as often.
      const order = round % 2 === 0 ? Object.entries(ways) : Object.entries(ways).reverse();
      for (const [way, beat] of order) results.get(way)!.push({ ...(await timedInLoop(beat)), cpuMs: await cpuOf(beat) });
    }
    if (failures.length > 0) throw new Error(`gw's beat failed: ${String(failures[0])}`);
    // Both ways left their member in every set: otherwise one of them did less work.
    const members = await Promise.all(apis.slice(0, 10).map((api) => redis.zrange(gatewayHeartbeatKey(api), '0', '-1')));
    if (!members.every((set) => set.includes('bench-gw') && set.includes('bench-gw-before'))) throw new Error('a way did not renew every set');
    await Promise.all(apis.map((api) => redis.del(gatewayHeartbeatKey(api))));
    const [baseline, ours] = Object.keys(ways) as [string, string];
    const rows: BenchRow[] = [];
    for (const [figure, pick] of [
      ['time', (r: Measured) => r.totalMs],
      ['CPU', (r: Measured) => r.cpuMs],
      ['longest event-loop wait', (r: Measured) => r.longestWaitMs],
    ] as const) {
      const name = (way: string): string => `a beat, ${APIS.toLocaleString('en')} APIs, ${figure}: ${way}`;
      const base = results.get(baseline)!.map(pick);
      const mine = results.get(ours)!.map(pick);
      rows.push({ suite: SUITE, name: name(baseline), value: Number(median(base).toFixed(2)), unit: 'ms' });
      rows.push({ suite: SUITE, name: name(ours), value: Number(median(mine).toFixed(2)), unit: 'ms', baseline: name(baseline), ...overRounds(mine.map((v, i) => v / base[i]!)) });
    }
    return rows;
  } finally {
    redis.disconnect();
  }
};

export default heartbeatSuite;
