import { afterEach, describe, expect, it } from 'vitest';
import { api, config } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { testEnv } from '../../harness/index.ts';
import { metricValues, startGateway, stopAllGateways, uniqueId } from './helpers.ts';

afterEach(stopAllGateways);

describe('gw_smoothing_allowance on Redis', () => {
  it('drops the series of an ApiDefinition the config no longer has, and keeps the others', async () => {
    const smoothing = { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 1 };
    const [kept, cut] = [api(uniqueId('kept'), { api_limit: { rate: 6, per: 2 }, smoothing }), api(uniqueId('cut'), { api_limit: { rate: 6, per: 2 }, smoothing })];
    const settings = { enable_redis_rolling_limiter: true };
    const gateway = startGateway(config({ settings, apis: [kept, cut] }), testEnv().redisUrl);
    // Three requests on each: above `threshold − step × trigger`, up to 4.
    for (const target of [kept, cut]) for (let i = 0; i < 3; i++) await gateway.engine.decide(request(target, null));
    const label = ({ source }: typeof kept): string => `${source.kind}/${source.namespace}/${source.name}`;
    expect(await metricValues(gateway.registry, 'gw_smoothing_allowance')).toEqual({ [label(kept)]: 4, [label(cut)]: 4 });

    gateway.engine.updateConfig(config({ settings, apis: [kept] }));
    expect(await metricValues(gateway.registry, 'gw_smoothing_allowance')).toEqual({ [label(kept)]: 4 });
  });
});
