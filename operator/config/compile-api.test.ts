import { describe, expect, it } from 'vitest';
import { compiledConfigSchema } from '../../crds/compiled.ts';
import { defaultGatewaySettings, gatewaySettingsSchema } from '../../crds/settings.ts';
import { policyCoversApi } from '../../crds/policy-coverage.ts';
import { apiDefinition as api, policy } from '../controllers/fixtures.ts';
import { configHash } from '../../common/compiled-config-map.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import { ApiCompiler, apiIdOf, grantedApiIds, policiesOfConfigMap, policyProblem, type ApiOutcome, type CompileInputs } from './compile-api.ts';

/** Compile inputs from lists, each lookup a scan of them. */
function listedInputs(apis: GwObject<'ApiDefinition'>[], policies: GwObject<'Policy'>[]): CompileInputs {
  return {
    allApis: () => apis,
    allPolicies: () => policies,
    apisWithId: (apiId) => apis.filter((api) => apiIdOf(api) === apiId),
    policiesCovering: (apiId) => policies.filter((policy) => policyCoversApi(policy.spec.access_rights, apiId)),
  };
}

describe('ApiCompiler', () => {
  it('compiles one API with every policy granting it, into a valid compiled config', () => {
    const a = api('a', { api_id: 'a' });
    const outcome = new ApiCompiler(defaultGatewaySettings).compile(a, listedInputs([a, api('b', { api_id: 'b' })], [policy('p', ['a', 'b']), policy('q', ['b'])]));
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.policyIds).toEqual(['ns/p']);
    expect(outcome.json).toBeDefined();
    const json = outcome.json ?? '';
    expect(outcome).toMatchObject({ hash: configHash(json), bytes: Buffer.byteLength(json) });
    const config = compiledConfigSchema.parse(JSON.parse(json));
    expect(config.apis.map((x) => x.api_id)).toEqual(['a']);
    expect(Object.keys(config.policies['ns/p']?.access_rights ?? {}).sort()).toEqual(['a', 'b']);
  });

  it('reuses the last outcome until the API, a granting policy or a granted API changes, keeping only the hash of its JSON', () => {
    const compiler = new ApiCompiler(defaultGatewaySettings);
    const a = api('a', { api_id: 'a' });
    const b = api('b', { api_id: 'b' });
    const compiledNow = (outcome: ApiOutcome): boolean => outcome.ok && outcome.json !== undefined;
    const first = compiler.compile(a, listedInputs([a, b], [policy('p', ['a', 'b'])]));
    expect(compiledNow(first)).toBe(true);
    const reused = compiler.compile(a, listedInputs([a, b], [policy('p', ['a', 'b'])]));
    expect(compiledNow(reused)).toBe(false);
    expect(reused).toEqual({ ...first, json: undefined });
    expect(compiledNow(compiler.compile(a, listedInputs([a, b], [policy('p', ['a', 'b']), policy('other', ['b'])])))).toBe(false);
    // The JSON a reused outcome stands for, compiled again on the same inputs.
    expect(compiler.configJson(a, listedInputs([a, b], [policy('p', ['a', 'b'])]))).toBe(first.ok ? first.json : 'not compiled');
    expect(compiledNow(compiler.compile(a, listedInputs([a, b], [policy('p', ['a', 'b'], 2)])))).toBe(true);
    expect(compiledNow(compiler.compile(a, listedInputs([a, b], [policy('p', ['a', 'b'], 2)])))).toBe(false);
    expect(compiledNow(compiler.compile(a, listedInputs([a, api('b', { api_id: 'b', name: 'Renamed' }, 2)], [policy('p', ['a', 'b'], 2)])))).toBe(true);
    compiler.forget('ns', 'a');
    expect(compiledNow(compiler.compile(a, listedInputs([a, api('b', { api_id: 'b', name: 'Renamed' }, 2)], [policy('p', ['a', 'b'], 2)])))).toBe(true);
  });

  it('compiles what a new compiler would, as the APIs a policy grants change', () => {
    const compiler = new ApiCompiler(defaultGatewaySettings);
    const a = api('a', { api_id: 'a' });
    const grants = [policy('p', ['a', 'b'])];
    const jsonOf = (outcome: ApiOutcome): string | undefined => (outcome.ok ? outcome.json : undefined);
    compiler.compile(a, listedInputs([a, api('b', { api_id: 'b' })], grants));
    // b is an object of its own again (as an informer hands an updated one), its name changed.
    const renamed = [a, api('b', { api_id: 'b', name: 'Renamed' }, 2)];
    const json = jsonOf(compiler.compile(a, listedInputs(renamed, grants)));
    expect(json).toBe(jsonOf(new ApiCompiler(defaultGatewaySettings).compile(a, listedInputs(renamed, grants))));
    expect(json).toContain('Renamed');
  });

  it('keeps the version its ConfigMap holds of a granting policy the compile step refuses, and never reuses that outcome', () => {
    const compiler = new ApiCompiler(defaultGatewaySettings);
    const a = api('a', { api_id: 'a' });
    const limited = (path: string, generation: number) => {
      const p = policy('p', ['a'], generation);
      p.spec.access_rights.a!.endpoints = [{ path, methods: [{ name: 'GET', limit: { rate: 2, per: 60 } }] }];
      return p;
    };
    const good = compiler.compile(a, listedInputs([a], [limited('/limited', 1)]));
    if (!good.ok || good.json === undefined) throw new Error('the good policy did not compile');
    const written = policiesOfConfigMap(good.json);
    // A typo in the endpoint's path: without its limit the policy would let keys through at the API's.
    const typo = compiler.compile(a, listedInputs([a], [limited('/limited([', 2)]), written);
    expect(typo).toMatchObject({ ok: true, policyIds: ['ns/p'], hash: good.hash, refusedPolicies: ['ns/p'] });
    expect(compiler.compile(a, listedInputs([a], [limited('/limited([', 2)]), written)).toMatchObject({ json: good.json });
    // Never compiled: the policy is not in force until it is fixed.
    const fresh = new ApiCompiler(defaultGatewaySettings).compile(a, listedInputs([a], [limited('/limited([', 1)]));
    expect(fresh).toMatchObject({ ok: true, policyIds: [], refusedPolicies: ['ns/p'] });
  });

  it("gives a refused API's config, served as in force, the operator's settings as they are now", () => {
    const a = api('a', { api_id: 'a' });
    const before = new ApiCompiler(defaultGatewaySettings).compile(a, listedInputs([a], []));
    if (!before.ok || before.json === undefined) throw new Error('the API did not compile');
    // The operator restarted with other settings while the API's edit is refused.
    const settings = gatewaySettingsSchema.parse({ enable_fixed_window_rate_limiter: true, rate_limit_response_headers: 'rate_limits' });
    const kept = new ApiCompiler(settings).refusedApiConfig(before.json, listedInputs([a], []), 1 << 20);
    const config = compiledConfigSchema.parse(JSON.parse(kept ?? '{}'));
    expect(config.settings).toEqual(settings);
    expect(config.apis).toEqual(compiledConfigSchema.parse(JSON.parse(before.json)).apis);
  });

  it('reports the API’s own problems with the compile step’s reason', () => {
    const bad = api('bad', { api_id: 'bad', use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x/([', method: 'GET', rate: 1, per: 1 }] } });
    const outcome = new ApiCompiler(defaultGatewaySettings).compile(bad, listedInputs([bad], []));
    expect(outcome).toMatchObject({ ok: false, apiId: 'bad', reason: 'InvalidRegex' });
    const first = api('dup-1', { api_id: 'same' });
    const second = api('dup-2', { api_id: 'same' });
    expect(new ApiCompiler(defaultGatewaySettings).compile(second, listedInputs([first, second], []))).toMatchObject({ ok: false, reason: 'DuplicateApiId' });
  });
});

describe('policy references', () => {
  it('derives ids, grants, and a policy’s problems', () => {
    expect(apiIdOf(api('x', { api_id: 'explicit' }))).toBe('explicit');
    expect(apiIdOf(api('x', {}))).toMatch(/^[0-9a-f]{24}$/);
    expect(grantedApiIds(policy('p', ['b', 'a']))).toEqual(['a', 'b']);
    expect(policyProblem(policy('p', ['a']), [api('a', { api_id: 'a' })])).toBeUndefined();
    expect(policyProblem(policy('p', ['gone']), [api('a', { api_id: 'a' })])).toMatchObject({ reason: 'MissingApi' });
    const typo = policy('p', ['a']);
    typo.spec.access_rights.a!.endpoints = [{ path: '/x([', methods: [{ name: 'GET', limit: { rate: 1, per: 1 } }] }];
    expect(policyProblem(typo, [api('a', { api_id: 'a' })])).toMatchObject({ reason: 'InvalidRegex', message: expect.stringMatching(/keep the version compiled last/) });
    // A pattern mistake is reported on the Policy, which stays in force as written.
    const constant = policy('p', ['a']);
    constant.spec.meta_data = { rate_limit_pattern: '$GW_META.org' };
    const reported = policyProblem(constant, [api('a', { api_id: 'a' })]);
    expect(reported).toMatchObject({ reason: 'InvalidRateLimitPattern', message: expect.stringContaining('"$GW_META.org" has a "$"') });
    expect(reported?.message).not.toMatch(/keep the version compiled last/);
  });
});
