import { afterEach, describe, expect, it } from 'vitest';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { testEnv } from '../../harness/index.ts';
import {
  alignTo,
  burst,
  metricValues,
  sleep,
  startGateway,
  stopAllGateways,
  stopGateway,
  timedDecide,
  uniqueId,
  type Gateway,
} from './helpers.ts';

afterEach(stopAllGateways);

const shared: [string, Partial<GatewaySettings>][] = [
  ['sliding log', { enable_redis_rolling_limiter: true }],
  ['sentinel', { enable_sentinel_rate_limiter: true }],
  ['fixed window', { enable_fixed_window_rate_limiter: true }],
];

function threeGateways(settings: Partial<GatewaySettings>, apiLimit: { rate: number; per: number }, apiIds?: string[]) {
  const ids = apiIds ?? [uniqueId('api')];
  const apis = ids.map((id) => api(id, { api_limit: apiLimit }));
  const cfg = config({ settings, apis });
  const gateways = [0, 1, 2].map(() => startGateway(cfg, testEnv().redisUrl));
  return { gateways, apis, cfg };
}

describe('shared algorithms: 200 concurrent callers over 3 gateways on one Redis', () => {
  it.each(shared)('%s admits exactly rate per window when demand exceeds it', async (_name, settings) => {
    // 2 s windows: room for a burst to finish inside one fixed window on a busy machine.
    const { gateways, apis } = threeGateways(settings, { rate: 50, per: 2 });
    const req = request(apis[0]!, null);
    await alignTo(2000);
    const first = await burst(gateways, req, 200);
    expect(first.reduce((a, b) => a + b)).toBe(50);
    // The next window: a whole window after the burst (every logged entry has left it),
    // and aligned for the fixed window.
    await sleep(2000);
    await alignTo(2000);
    const second = await burst(gateways, req, 200);
    expect(second.reduce((a, b) => a + b)).toBe(50);
  });

  it.each(shared)('%s never admits more than rate in any window under sustained load', async (name, settings) => {
    const rate = 20;
    const perMs = 1000;
    const { gateways, apis } = threeGateways(settings, { rate, per: perMs / 1000 });
    const req = request(apis[0]!, null);
    const admitted: { at: number; done: number; reset: number }[] = [];
    const until = Date.now() + 2500;
    await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const gateway = gateways[i % 3]!;
        while (Date.now() < until) {
          const { outcome, at, done, reset } = await timedDecide(gateway, req);
          if (outcome === 'allowed') admitted.push({ at, done, reset: reset! });
          await sleep(60 + (i % 40));
        }
      }),
    );
    admitted.sort((a, b) => a.at - b.at);
    // Spike arrest: demand never falls below the rate, blocked requests stay in the log, so
    // the sliding log and its sentinel variant admit their first `rate` and then nothing for
    // the whole run; the fixed window starts afresh every window.
    if (name === 'fixed window') expect(admitted.length).toBeGreaterThanOrEqual(rate * 2);
    else expect(admitted).toHaveLength(rate);
    if (name === 'fixed window') {
      // Counted per window Redis put each admission in (its reset is the window's end).
      const perWindow = new Map<number, number>();
      for (const { reset } of admitted) perWindow.set(reset, (perWindow.get(reset) ?? 0) + 1);
      expect(Math.max(...perWindow.values())).toBeLessThanOrEqual(rate);
    } else {
      // Each admission was logged at a Redis time between its `at` and its `done`: rate + 1
      // admissions surely share a window (t - per, t] when the last of them was done less
      // than per after the first began.
      for (let end = rate; end < admitted.length; end++) {
        const group = admitted.slice(end - rate, end + 1);
        const span = Math.max(...group.map((a) => a.done)) - group[0]!.at;
        expect(span, `admissions ${end - rate}..${end}`).toBeGreaterThanOrEqual(perMs);
      }
    }
  });
});

/** Algorithm labels of the decisions a gateway has made so far, sorted. */
async function algorithmsUsed(gateway: Gateway): Promise<string[]> {
  const labels = Object.keys(await metricValues(gateway.registry, 'gw_limit_decisions_total'));
  return [...new Set(labels.map((label) => label.split('/')[0]!))].sort();
}

/** Three heartbeat periods (200 ms each): every gateway has renewed and read the others. */
const waitForBeats = (): Promise<void> => sleep(650);

describe('Distributed Rate Limiter', () => {
  it('each of 3 live gateways admits floor(rate/3); the split follows heartbeats that stop', async () => {
    const ids = [uniqueId('drl'), uniqueId('drl'), uniqueId('drl'), uniqueId('drl')];
    const { gateways, apis } = threeGateways({}, { rate: 31, per: 60 }, ids);
    await waitForBeats();
    expect(await burst(gateways, request(apis[0]!, null), 200)).toEqual([10, 10, 10]);

    // A gateway that closes leaves the sets at once: the two left get floor(31/2).
    await stopGateway(gateways[2]!);
    await waitForBeats();
    expect(await burst(gateways.slice(0, 2), request(apis[1]!, null), 200)).toEqual([15, 15]);

    // A gateway that dies without leaving counts until its heartbeat expires.
    const { redis } = gateways[0]!;
    const ghostUntil = Date.now() + 1200;
    for (const id of ids.slice(2)) await redis.zadd(`gw:gateways:${id}`, ghostUntil, 'ghost');
    await waitForBeats();
    expect(await burst(gateways.slice(0, 2), request(apis[2]!, null), 200)).toEqual([10, 10]);
    await sleep(ghostUntil - Date.now() + 450);
    expect(await burst(gateways.slice(0, 2), request(apis[3]!, null), 200)).toEqual([15, 15]);
  });
});

describe('Distributed Rate Limiter: gateways that start or load an API together', () => {
  // Beats 10 s apart: only the reads of newly served sets can count the others in time.
  const slowBeats = { heartbeatIntervalMs: 10_000 };

  it('gateways started together each take their share from their first request, and so does one that joins later', async () => {
    const limited = api(uniqueId('drl-start'), { api_limit: { rate: 60, per: 60 } });
    const cfg = config({ apis: [limited] });
    const gateways = [0, 1, 2].map(() => startGateway(cfg, testEnv().redisUrl, slowBeats));
    // At once: each gateway's first decisions wait for its first reads of the API's set.
    expect(await burst(gateways, request(limited, null), 300)).toEqual([20, 20, 20]);
    const joiner = startGateway(cfg, testEnv().redisUrl, slowBeats);
    expect(await burst([joiner], request(limited, null), 100)).toEqual([15]);
  });

  it('an API loaded by a running fleet at once is split from its first request', async () => {
    const running = api(uniqueId('drl-old'), { api_limit: { rate: 60, per: 60 } });
    const loaded = api(uniqueId('drl-new'), { api_limit: { rate: 60, per: 60 } });
    const gateways = [0, 1, 2].map(() => startGateway(config({ apis: [running] }), testEnv().redisUrl, slowBeats));
    await sleep(650);
    for (const gateway of gateways) gateway.engine.updateConfig(config({ apis: [running, loaded] }));
    expect(await burst(gateways, request(loaded, null), 300)).toEqual([20, 20, 20]);
  });
});

describe('Distributed Rate Limiter: who counts', () => {
  it('a policy global allowance is split among the gateways serving any API it grants, and only those', async () => {
    const [a, b, c] = [uniqueId('ga'), uniqueId('gb'), uniqueId('gc')].map((id) => api(id));
    const right = (id: string) => ({ api_id: id, api_name: id, limit: null, endpoints: [] });
    const p = policy('global', { rate: { rate: 30, per: 60 }, access_rights: { [a!.api_id]: right(a!.api_id), [b!.api_id]: right(b!.api_id) } });
    const url = testEnv().redisUrl;
    const onA = startGateway(config({ apis: [a!], policies: [p] }), url);
    const onB = startGateway(config({ apis: [b!], policies: [p] }), url);
    startGateway(config({ apis: [c!], policies: [p] }), url);
    await waitForBeats();
    const caller = { session: session({ apply_policies: ['global'] }), raw: uniqueId('key') };
    // Two gateways serve a or b: 15 each; the gateway serving only c does not dilute it.
    expect(await burst([onA], request(a!, caller), 40)).toEqual([15]);
    expect(await burst([onB], request(b!, caller), 40)).toEqual([15]);
  });
});

describe('drl_threshold with live gateways', () => {
  it('switches between the DRL and the sliding log both ways as gateways come and go', async () => {
    // 30 req/s; threshold 10: DRL only while 30 > 10 x gateways.
    const ids = [uniqueId('dyn'), uniqueId('dyn'), uniqueId('dyn')];
    const { gateways, apis, cfg } = threeGateways({ drl_threshold: 10 }, { rate: 30, per: 1 }, ids);
    await waitForBeats();
    // 3 gateways: 30 is not > 30 -> sliding log, one shared count of exactly 30.
    const shared = await burst(gateways, request(apis[0]!, null), 200);
    expect(shared.reduce((a, b) => a + b)).toBe(30);
    expect(await algorithmsUsed(gateways[0]!)).toEqual(['sliding_log']);

    await stopGateway(gateways[2]!);
    await waitForBeats();
    // 2 gateways: 30 > 20 -> DRL, 15 each from in-process buckets.
    expect(await burst(gateways.slice(0, 2), request(apis[1]!, null), 200)).toEqual([15, 15]);
    expect(await algorithmsUsed(gateways[0]!)).toEqual(['drl', 'sliding_log']);

    const third = startGateway(cfg, testEnv().redisUrl);
    await waitForBeats();
    const back = await burst([gateways[0]!, gateways[1]!, third], request(apis[2]!, null), 200);
    expect(back.reduce((a, b) => a + b)).toBe(30);
    expect(await algorithmsUsed(third)).toEqual(['sliding_log']);
  });
});
