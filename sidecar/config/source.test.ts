import { describe, expect, it } from 'vitest';
import { defaultGatewaySettings, gatewaySettingsSchema } from '../../crds/settings.ts';
import type { CompiledConfig } from '../../crds/compiled.ts';
import { mergeConfigs } from './source.ts';

const part = (apiId: string, policyIds: string[], drl: number): CompiledConfig =>
  ({
    version: 1,
    settings: gatewaySettingsSchema.parse({ drl_threshold: drl }),
    apis: [{ api_id: apiId }],
    policies: Object.fromEntries(policyIds.map((id) => [id, { id, from: apiId }])),
  }) as unknown as CompiledConfig;

describe('mergeConfigs', () => {
  it('concatenates APIs, unions policies, takes the first part settings', () => {
    const merged = mergeConfigs([part('a', ['ns/p1', 'ns/p2'], 1), part('b', ['ns/p2'], 2)], defaultGatewaySettings);
    expect(merged.apis.map((a) => a.api_id)).toEqual(['a', 'b']);
    expect(Object.keys(merged.policies).sort()).toEqual(['ns/p1', 'ns/p2']);
    expect(merged.settings.drl_threshold).toBe(1);
  });

  it('is an empty config with the fallback settings when nothing is loaded', () => {
    expect(mergeConfigs([], defaultGatewaySettings)).toEqual({ version: 1, settings: defaultGatewaySettings, apis: [], policies: {} });
  });
});
