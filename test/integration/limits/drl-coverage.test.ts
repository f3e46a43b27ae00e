import { afterEach, describe, expect, it } from 'vitest';
import { testEnv } from '../../harness/index.ts';
import { api, config, policy, session } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { burst, sleep, startGateway, stopAllGateways, uniqueId, type Gateway } from './helpers.ts';

/**
 * The DRL splits a key's global allowance among the live gateways serving the APIs it is spent
 * on (docs/behaviour.md#algorithms), whichever grant says what those are. Gateway A serves api1
 * and gateway B api2, as one sidecar per app does; the key calls both.
 */
describe('the DRL share of a global allowance over APIs that different gateways serve', () => {
  afterEach(() => stopAllGateways());

  const twoGateways = (policies: ReturnType<typeof policy>[]): { apis: ReturnType<typeof api>[]; a: Gateway; b: Gateway } => {
    const apis = [api(uniqueId('api1')), api(uniqueId('api2'))];
    const url = testEnv().redisUrl;
    const a = startGateway(config({ apis: [apis[0]!], policies }), url, { instanceId: uniqueId('gw-a') });
    const b = startGateway(config({ apis: [apis[1]!], policies }), url, { instanceId: uniqueId('gw-b') });
    return { apis, a, b };
  };
  const grants = (...apis: ReturnType<typeof api>[]) => Object.fromEntries(apis.map((x) => [x.api_id, { api_id: x.api_id }]));
  /** Both gateways' first beats and reads are done. */
  const settled = (): Promise<void> => sleep(650);

  it('splits a Policy without access_rights, which covers every API the key may call', async () => {
    const everywhere = policy(uniqueId('everywhere'), { rate: { rate: 10, per: 60 } });
    const { apis, a, b } = twoGateways([everywhere]);
    await settled();
    const key = { raw: uniqueId('raw'), session: session({ apply_policies: [everywhere.source.name], access_rights: grants(...apis) }) };
    const [viaA] = await burst([a], request(apis[0]!, key), 12);
    const [viaB] = await burst([b], request(apis[1]!, key), 12);
    expect([viaA, viaB]).toEqual([5, 5]);
    // Its limits read gives the same split.
    expect((await b.engine.explain(request(apis[1]!, key))).limits[0]?.drl).toEqual({ gateways: 2, share: 5 });
  });

  it("splits a key's own allowance over the APIs of its own grant, which no Policy names", async () => {
    const { apis, a, b } = twoGateways([]);
    await settled();
    const key = { raw: uniqueId('raw'), session: session({ rate: 10, allowance: 10, per: 60, access_rights: grants(...apis) }) };
    const [viaA] = await burst([a], request(apis[0]!, key), 12);
    const [viaB] = await burst([b], request(apis[1]!, key), 12);
    expect([viaA, viaB]).toEqual([5, 5]);
  });

  it('leaves out the gateways of an API where a per-API limit replaces the allowance', async () => {
    const [api1, api2] = [uniqueId('api1'), uniqueId('api2')];
    const perApi = { rate: { rate: 100, per: 60 }, quota_max: -1, quota_renewal_rate: 0, throttle_interval: 0, throttle_retry_limit: 0, smoothing: null };
    const mixed = policy(uniqueId('mixed'), {
      rate: { rate: 10, per: 60 },
      access_rights: {
        [api1]: { api_id: api1, api_name: api1, limit: perApi, endpoints: [] },
        [api2]: { api_id: api2, api_name: api2, limit: null, endpoints: [] },
      },
    });
    const apis = [api(api1), api(api2)];
    const url = testEnv().redisUrl;
    startGateway(config({ apis: [apis[0]!], policies: [mixed] }), url, { instanceId: uniqueId('gw-a') });
    const b = startGateway(config({ apis: [apis[1]!], policies: [mixed] }), url, { instanceId: uniqueId('gw-b') });
    await settled();
    const key = { raw: uniqueId('raw'), session: session({ apply_policies: [mixed.source.name] }) };
    // Gateway A never spends the allowance: B takes all of it.
    expect((await burst([b], request(apis[1]!, key), 12))[0]).toBe(10);
  });
});
