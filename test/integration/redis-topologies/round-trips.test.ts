import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { measureRoundTrips, type NodeAddress } from '../../support/round-trips.ts';
import { startRedisCluster, startRedisSentinel, testEnv, type RedisClusterHandle, type RedisSentinelHandle } from '../../harness/index.ts';
import { uniqueId } from '../limits/helpers.ts';
import { startGateway, stopAllGateways, waitReady } from './gateways.ts';

/**
 * Redis round trips per decision, read from Redis (MONITOR on every data node): one on a
 * single server and on a Sentinel-managed master, whatever the decision met; on a
 * Cluster, the limit scripts (one per limiter slot, sent together) are one round trip,
 * and a quota, which runs only once they all passed, a second. A request refused on a
 * Cluster also takes a second: undoing what the other limiters recorded.
 */

let cluster: RedisClusterHandle;
let sentinel: RedisSentinelHandle;
beforeAll(async () => {
  [cluster, sentinel] = await Promise.all([startRedisCluster(), startRedisSentinel()]);
}, 120_000);
afterAll(async () => {
  await Promise.all([cluster?.dispose(), sentinel?.dispose()]);
});
afterEach(stopAllGateways);

const localhost = (port: number): NodeAddress => ({ host: '127.0.0.1', port });
const topologies: Record<string, () => Promise<{ url: string; nodes: NodeAddress[] }>> = {
  standalone: async () => ({ url: testEnv().redisUrl, nodes: [localhost(Number(new URL(testEnv().redisUrl).port))] }),
  sentinel: async () => ({ url: sentinel.url, nodes: [localhost(await sentinel.masterPort())] }),
  cluster: async () => ({ url: cluster.url, nodes: cluster.ports.map(localhost) }),
};

/** An API-level and a key-level limit; `key` shapes the key's own limit and quota. */
async function measure(topology: string, key: { rate: number; quota: boolean }) {
  const { url, nodes } = await topologies[topology]!();
  const a = api(uniqueId('rtt'), { api_limit: { rate: 100_000, per: 60 } });
  const p = policy('rtt', { rate: { rate: key.rate, per: 60 }, quota_max: key.quota ? 100_000 : -1, quota_renewal_rate: 3600 });
  const settings = { enable_redis_rolling_limiter: true, redis_failure_mode: 'closed' as const, redis_timeout_ms: 3000 };
  const instanceId = uniqueId('rtt-gw');
  const gateway = startGateway(config({ settings, apis: [a], policies: [p] }), url, { instanceId });
  await waitReady(gateway.redis);
  const req = request(a, { session: session({ apply_policies: ['rtt'] }), raw: uniqueId('key') });
  // Loads the limit function (a first call may find it missing) and, with a rate of 1, uses it up.
  expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
  return measureRoundTrips({ engine: gateway.engine, instanceId, request: req, decisions: 40, inFlight: 8, nodes });
}

const admitted = { rate: 100_000, quota: true };
const noQuota = { rate: 100_000, quota: false };
// A key rate of 1, used up before measuring: every measured request is refused by the key.
const refused = { rate: 1, quota: true };

describe('round trips per decision, read from Redis', () => {
  it.each([
    ['standalone', 'API limit + key limit + quota', 1, 1, admitted],
    ['sentinel', 'API limit + key limit + quota', 1, 1, admitted],
    ['cluster', 'API limit + key limit + quota', 2, 3, admitted],
    ['standalone', 'API limit + key limit, no quota', 1, 1, noQuota],
    ['cluster', 'API limit + key limit, no quota', 1, 2, noQuota],
    ['standalone', 'refused by the key limit', 1, 1, refused],
    ['sentinel', 'refused by the key limit', 1, 1, refused],
    // The limit scripts, then the undo of the API limiter's admission.
    ['cluster', 'refused by the key limit', 2, 3, refused],
  ])('%s, %s: %i round trip(s), %i script call(s)', async (topology, _name, roundTrips, scriptCalls, key) => {
    const figures = await measure(topology, key);
    const outcomes = key === refused ? { key_rate_limited: 40 } : { allowed: 40 };
    expect(figures).toEqual({ decisions: 40, scriptCallsPerDecision: scriptCalls, roundTripsPerDecision: roundTrips, outOfOrder: 0, outcomes });
  });
});
