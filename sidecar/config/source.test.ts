import { describe, expect, it } from 'vitest';
import { defaultGatewaySettings, gatewaySettingsSchema } from '../../crds/settings.ts';
import type { CompiledConfig } from '../../crds/compiled.ts';
import { mergeConfigs } from './source.ts';

/** One API's part; each policy grants the APIs listed for it (by default, this part's API), as compiled at `from`. */
const part = (apiId: string, policies: Record<string, string[]>, drl: number, from = apiId): CompiledConfig =>
  ({
    version: 1,
    settings: gatewaySettingsSchema.parse({ drl_threshold: drl }),
    apis: [{ api_id: apiId }],
    policies: Object.fromEntries(
      Object.entries(policies).map(([id, granted]) => [id, { id, from, access_rights: Object.fromEntries(granted.map((g) => [g, { api_id: g, from }])) }]),
    ),
  }) as unknown as CompiledConfig;

describe('mergeConfigs', () => {
  it('concatenates APIs, unions policies, takes the first part settings', () => {
    const merged = mergeConfigs([part('a', { 'ns/p1': ['a'], 'ns/p2': ['a', 'b'] }, 1), part('b', { 'ns/p2': ['a', 'b'] }, 2)], defaultGatewaySettings);
    expect(merged.apis.map((a) => a.api_id)).toEqual(['a', 'b']);
    expect(Object.keys(merged.policies).sort()).toEqual(['ns/p1', 'ns/p2']);
    expect(merged.settings.drl_threshold).toBe(1);
  });

  it('takes a policy from a current part over one served on after its API was deleted, whatever their order', () => {
    // b was deleted (its part is outdated); p was edited since, which only a's part shows.
    const a = part('a', { 'ns/p': ['a', 'b'] }, 1, 'a, edited');
    const b = part('b', { 'ns/p': ['a', 'b'] }, 1, 'b, before the delete');
    for (const parts of [[a, b], [b, a]]) {
      const merged = mergeConfigs(parts, defaultGatewaySettings, (p) => p !== b);
      expect(merged.policies['ns/p']).toMatchObject({ from: 'a, edited', access_rights: { a: { from: 'a, edited' }, b: { from: 'a, edited' } } });
    }
  });

  it("takes a policy's grant of an API from that API's own part when the winning copy lacks it", () => {
    // a's part was compiled after b was deleted: its copy of p no longer grants b, which is served until the reload.
    const a = part('a', { 'ns/p': ['a'] }, 1);
    const b = part('b', { 'ns/p': ['a', 'b'] }, 1);
    const merged = mergeConfigs([a, b], defaultGatewaySettings, (p) => p !== b);
    expect(merged.policies['ns/p']).toMatchObject({ from: 'a', access_rights: { a: { from: 'a' }, b: { from: 'b' } } });
    // The parts' own objects are left as they were.
    expect(Object.keys(a.policies['ns/p']!.access_rights)).toEqual(['a']);
  });

  it('takes the settings of the first part that is current, not of one served on after its API was deleted', () => {
    const deleted = part('a', {}, 1);
    const current = part('b', {}, 2);
    expect(mergeConfigs([deleted, current], defaultGatewaySettings, (p) => p !== deleted).settings.drl_threshold).toBe(2);
    expect(mergeConfigs([deleted], defaultGatewaySettings, () => false).settings.drl_threshold).toBe(1);
  });

  it('is an empty config with the fallback settings when nothing is loaded', () => {
    expect(mergeConfigs([], defaultGatewaySettings)).toEqual({ version: 1, settings: defaultGatewaySettings, apis: [], policies: {} });
  });
});
