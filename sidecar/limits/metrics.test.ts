import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { api, config, policy } from '../../test/support/compiled-fixtures.ts';
import { ALLOWANCE_STALE_MS, MAX_ALLOWANCE_SERIES, SmoothingAllowances, type AllowanceLabels } from './metrics.ts';

/** The gauge's series as `kind/namespace/name` → value, as a scrape reads them. */
async function series(registry: Registry): Promise<Record<string, number>> {
  const gauge = (await registry.getMetricsAsJSON()).find((metric) => metric.name === 'gw_smoothing_allowance')!;
  return Object.fromEntries(gauge.values.map(({ labels, value }) => [`${labels.kind}/${labels.namespace}/${labels.name}`, value]));
}

const key = (name: string): AllowanceLabels => ({ kind: 'Key', namespace: 'default', name });

describe('SmoothingAllowances (gw_smoothing_allowance)', () => {
  it('drops a series that has not moved for ALLOWANCE_STALE_MS, at a scrape or at another move', async () => {
    let now = 0;
    const registry = new Registry();
    const allowances = new SmoothingAllowances([registry], 'omit', () => now);
    allowances.set(key('a'), 4);
    now = 1000;
    allowances.set(key('b'), 6);
    now = ALLOWANCE_STALE_MS;
    allowances.set(key('a'), 8);
    expect(await series(registry)).toEqual({ 'Key/default/a': 8, 'Key/default/b': 6 });
    now = ALLOWANCE_STALE_MS + 1001;
    expect(await series(registry)).toEqual({ 'Key/default/a': 8 });
    now = 2 * ALLOWANCE_STALE_MS + 1;
    allowances.set(key('c'), 2);
    expect(await series(registry)).toEqual({ 'Key/default/c': 2 });
  });

  it('holds MAX_ALLOWANCE_SERIES at most, dropping the one moved longest ago', async () => {
    const registry = new Registry();
    const allowances = new SmoothingAllowances([registry], 'sum');
    for (let i = 0; i <= MAX_ALLOWANCE_SERIES; i++) allowances.set(key(`k${i}`), 2);
    // k0 moves again: k1 is now the one moved longest ago.
    allowances.set(key('k0'), 4);
    allowances.set(key('new'), 2);
    const held = await series(registry);
    expect(Object.keys(held)).toHaveLength(MAX_ALLOWANCE_SERIES);
    expect(held).toMatchObject({ 'Key/default/k0': 4, 'Key/default/new': 2 });
    expect(held).not.toHaveProperty('Key/default/k1');
    expect(held).not.toHaveProperty('Key/default/k2');
  });

  it("drops the series of the Policies and ApiDefinitions a config no longer has, and keeps Keys'", async () => {
    const registry = new Registry();
    const allowances = new SmoothingAllowances([registry], 'omit');
    const [kept, cut] = [api('kept'), api('cut')];
    const [keptPolicy, cutPolicy] = [policy('kept-policy'), policy('cut-policy', {}, 'other')];
    for (const { source } of [kept, cut, keptPolicy, cutPolicy]) allowances.set(source, 4);
    allowances.set(key('a'), 2);
    allowances.retainSources(config({ apis: [kept], policies: [keptPolicy] }));
    expect(await series(registry)).toEqual({ 'ApiDefinition/default/kept': 4, 'Policy/default/kept-policy': 4, 'Key/default/a': 2 });
  });

  it('keeps a series that moved after the question whose answer would drop it', async () => {
    let now = 0;
    const registry = new Registry();
    const allowances = new SmoothingAllowances([registry], 'sum', () => now);
    allowances.set(key('before'), 2);
    now = 10;
    allowances.set(key('after'), 2);
    allowances.retain(() => false, 5);
    expect(await series(registry)).toEqual({ 'Key/default/after': 2 });
  });
});
