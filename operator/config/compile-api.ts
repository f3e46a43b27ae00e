import { ApiCompileCache, apiIdOf as contractApiIdOf, compile, compileForApi, policyRefusingReasons, type ApiDefinitionInput, type CompileProblem, type PolicyInput } from '../../crds/compile/index.ts';
import { configHash } from '../../common/compiled-config-map.ts';
import { flatKey } from '../../common/flat-key.ts';
import { sameData } from '../../common/same-data.ts';
import { compiledConfigSchema, type CompiledConfig, type CompiledPolicy, type CompiledRate } from '../../crds/compiled.ts';
import { EVERY_API } from '../../crds/policy-coverage.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { GwObject } from '../runtime/gw-object.ts';

/**
 * The operator's view of the pure compile step: cached objects in, per-resource outcome
 * out. The compile step validates every spec again (an object stored before a CRD
 * upgrade may not match today's schema) and reports what is wrong as a problem with a reason.
 */

type Api = GwObject<'ApiDefinition'>;
type Policy = GwObject<'Policy'>;

const asApi = (obj: Api): ApiDefinitionInput => ({ metadata: obj.metadata, spec: obj.spec });
const asPolicy = (obj: Policy): PolicyInput => ({ metadata: obj.metadata, spec: obj.spec });

export const apiIdOf = (api: Api): string => contractApiIdOf(api);

/** The api_ids an ApiDefinition's change touches: its own now and before (one, unless it changed it). */
export const apiIdsOfChange = (event: { object: Api; old?: Api | undefined }): Set<string> =>
  new Set([event.object, event.old].flatMap((api) => (api ? [apiIdOf(api)] : [])));

/** api_ids a Policy grants: the keys of its access_rights (what compileForApi selects on). */
export function grantedApiIds(policy: Policy): string[] {
  return Object.keys(policy.spec.access_rights).sort();
}

/** The api_ids a Policy's limits cover (crds/policy-coverage.ts): those it grants, or EVERY_API when it names none. */
export function coveredApiIds(policy: Policy): string[] {
  const granted = grantedApiIds(policy);
  return granted.length > 0 ? granted : [EVERY_API];
}

export interface Problem {
  reason: string;
  message: string;
}

const isOf = (obj: GwObject, kind: string) => (p: CompileProblem) => p.ref.kind === kind && p.ref.namespace === obj.metadata.namespace && p.ref.name === obj.metadata.name;

/** The problems of one resource as one condition: the first problem's reason, every message (field: message). */
function summarize(problems: CompileProblem[]): Problem | undefined {
  const first = problems[0];
  if (!first) return undefined;
  const messages = problems.slice(0, 10).map((p) => `${p.field}: ${p.message}`);
  if (problems.length > 10) messages.push(`and ${problems.length - 10} more`);
  return { reason: first.reason, message: messages.join('; ') };
}

export type ApiOutcome =
  | {
    ok: true;
    apiId: string;
    policyIds: string[];
    /** What the gateways serve, for the API's status: its listen path and API-level limit (null when disabled). */
    listenPath: string;
    apiLimit: CompiledRate | null;
    /** configHash of the compiled config's JSON, and its size in bytes. */
    hash: string;
    bytes: number;
    /**
     * The JSON itself, when this call compiled it. The memo keeps only hash and size (a
     * thousand APIs' configs were 5.7 MiB of heap): a reused outcome whose ConfigMap must be
     * written gets its JSON from ApiCompiler.configJson.
     */
    json?: string;
    /**
     * Granting policies the compile step refused, each kept at its version in the `lastWritten`
     * it was given: the caller compiles again with the stored ConfigMap's, and the outcome is never reused.
     */
    refusedPolicies?: string[];
  }
  | { ok: false; apiId: string; reason: string; message: string };

/** What every compile of one ApiCompiler shares: the operator's settings, and the APIs compiled so far. */
interface CompileContext {
  settings: GatewaySettings;
  cache: ApiCompileCache;
}

/**
 * What compiling one API reads. Every ApiDefinition and Policy, for a compile; the APIs of an
 * api_id and the Policies covering one (crds/policy-coverage.ts), for telling whether a compile is needed, which is what
 * nearly every reconcile asks (the operator answers those from its cache indexes, so a resync
 * of 1,000 APIs does not scan them 1,000 times).
 */
export interface CompileInputs {
  allApis(): Api[];
  allPolicies(): Policy[];
  apisWithId(apiId: string): Api[];
  policiesCovering(apiId: string): Policy[];
}

/** The policies of the API's ConfigMap as written last, by id: what a policy the compile step now refuses keeps (docs/behaviour.md#bad-edits). */
export type LastWrittenPolicies = Readonly<Record<string, CompiledPolicy>>;

/** A compiled ConfigMap's config; undefined when it holds none this operator can read. */
function configOfConfigMap(json: string | undefined): CompiledConfig | undefined {
  if (json === undefined) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    return undefined;
  }
  // Checked, but used as written: the schema's output orders fields its own way, and what is
  // kept as it was keeps the ConfigMap's hash.
  return compiledConfigSchema.safeParse(raw).success ? (raw as CompiledConfig) : undefined;
}

/** The policies of a compiled ConfigMap's config; none when it holds no config this operator can read. */
export function policiesOfConfigMap(json: string | undefined): Readonly<Record<string, CompiledPolicy>> {
  return configOfConfigMap(json)?.policies ?? {};
}

/** A granting policy the compile step refused keeps its version in `lastWritten`, in the compile step's order of policies (by namespace/name), so a kept policy sits where it did. */
function keepRefused(policies: Record<string, CompiledPolicy>, refused: readonly string[], lastWritten: LastWrittenPolicies): Record<string, CompiledPolicy> {
  if (refused.length === 0) return policies;
  const kept = { ...policies };
  for (const id of refused) if (lastWritten[id]) kept[id] = lastWritten[id];
  return Object.fromEntries(Object.entries(kept).sort(([a], [b]) => a.localeCompare(b)));
}

/** Ids of the policies the compile step left out whole (policyRefusingReasons). */
function refusedPolicyIds(problems: readonly CompileProblem[]): string[] {
  const refused = problems.filter((p) => p.ref.kind === 'Policy' && policyRefusingReasons.has(p.reason));
  return [...new Set(refused.map((p) => `${p.ref.namespace}/${p.ref.name}`))];
}

/**
 * One ApiDefinition's compiled config (it and every policy granting it), or why it has none.
 * A granting policy the compile step refused keeps the version in `lastWritten`, if any;
 * `refusedPolicies` names them, since the outcome then depends on the ConfigMap as stored.
 */
function compileOne(api: Api, apiId: string, inputs: CompileInputs, { settings, cache, lastWritten }: CompileContext & { lastWritten: LastWrittenPolicies }): ApiOutcome {
  const result = compileForApi(apiId, { apiDefinitions: inputs.allApis().map(asApi), policies: inputs.allPolicies().map(asPolicy), settings, cache });
  const problem = summarize(result.problems.filter(isOf(api, 'ApiDefinition')));
  if (problem) return { ok: false, apiId, ...problem };
  const compiledApi = result.config.apis.find((compiled) => compiled.api_id === apiId);
  if (!compiledApi) return { ok: false, apiId, reason: 'NotCompiled', message: `the compile step produced no API for api_id ${apiId}` };
  const refused = refusedPolicyIds(result.problems);
  const config: CompiledConfig = { ...result.config, policies: keepRefused(result.config.policies, refused, lastWritten) };
  const json = JSON.stringify(config);
  return {
    ok: true,
    apiId,
    policyIds: Object.keys(config.policies).sort(),
    listenPath: compiledApi.listen_path,
    apiLimit: compiledApi.api_limit,
    hash: configHash(json),
    bytes: Buffer.byteLength(json),
    json,
    ...(refused.length > 0 ? { refusedPolicies: refused } : {}),
  };
}

const version = (obj: GwObject): string => `${obj.metadata.uid ?? obj.metadata.name}@${obj.metadata.generation ?? 0}`;

/**
 * Everything one API's compiled config depends on: the API, the policies granting it,
 * and the APIs those policies grant (their names and ignored endpoints appear in the
 * compiled policies) — each as uid@generation, so status writes do not count.
 */
function fingerprint(api: Api, apiId: string, inputs: CompileInputs): string {
  const granting = inputs.policiesCovering(apiId);
  const touched = new Set([apiId, ...granting.flatMap(grantedApiIds)]);
  const apis = [...touched].flatMap((id) => inputs.apisWithId(id).map(version));
  return [version(api), ...granting.map(version).sort(), ...apis.sort()].join('|');
}

/**
 * The compile step behind a memo: an API whose inputs (fingerprint) did not change since
 * its last compile is not compiled again. Most reconciles are of that kind — the
 * operator's own ConfigMap and status writes come back as watch events, and every
 * resync revisits every API.
 */
export class ApiCompiler {
  /**
   * The settings, and the APIs compiled so far by their cached object's spec: an API's config
   * holds the policies granting it, and those policies' other APIs are compiled with it, so
   * without the cache each API was compiled again for every API its policies grant.
   */
  readonly #context: CompileContext;
  readonly #memo = new Map<string, { fingerprint: string; outcome: ApiOutcome }>();

  constructor(settings: GatewaySettings) {
    this.#context = { settings, cache: new ApiCompileCache() };
  }

  compile(api: Api, inputs: CompileInputs, lastWritten: LastWrittenPolicies = {}): ApiOutcome {
    const apiId = apiIdOf(api);
    const key = flatKey(api.metadata.namespace, api.metadata.name);
    const print = fingerprint(api, apiId, inputs);
    const memo = this.#memo.get(key);
    if (memo?.fingerprint === print) return memo.outcome;
    const outcome = compileOne(api, apiId, inputs, { ...this.#context, lastWritten });
    if (outcome.ok && outcome.refusedPolicies) {
      this.#memo.delete(key);
      return outcome;
    }
    const kept: ApiOutcome = outcome.ok
      ? { ok: true, apiId, policyIds: outcome.policyIds, listenPath: outcome.listenPath, apiLimit: outcome.apiLimit, hash: outcome.hash, bytes: outcome.bytes }
      : outcome;
    this.#memo.set(key, { fingerprint: print, outcome: kept });
    return outcome;
  }

  /** The compiled config's JSON, compiled again: what a reused outcome (no `json`) stands for, the inputs being the same. */
  configJson(api: Api, inputs: CompileInputs): string {
    // A reused outcome never kept a refused policy's last version, so none is read here.
    const outcome = compileOne(api, apiIdOf(api), inputs, { ...this.#context, lastWritten: {} });
    if (!outcome.ok || outcome.json === undefined) throw new Error(`compiling ${api.metadata.namespace}/${api.metadata.name} again failed: ${outcome.ok ? 'no JSON' : outcome.message}`);
    return outcome.json;
  }

  /**
   * The config of an ApiDefinition the compile step refuses (docs/behaviour.md#bad-edits): its
   * API as in force (`inForceJson`, its ConfigMap's config), with the Policies granting that
   * API and the operator's settings as they are now: a sidecar takes its settings from one of
   * its APIs' configs, so one left on old settings would run every API it serves on them. So a Policy deleted, edited, or no longer granting it reaches its keys
   * while the API's own edit is refused; a granting Policy the compile step refuses keeps its
   * version in force. Undefined when `inForceJson` holds no config of an API this operator can read.
   *
   * Past `maxBytes` (one ConfigMap's bound: the refusal may be ConfigTooLarge itself, new
   * Policies having grown the config), no Policy is added, but a revoked grant still goes: the
   * Policies in force, each as it is now. Should a changed one still not fit, the changed ones
   * go and only those unchanged stay, which is in force already and so fits: a grant is refused,
   * never kept looser than its Policy says.
   */
  refusedApiConfig(inForceJson: string, inputs: CompileInputs, maxBytes: number): string | undefined {
    const inForce = configOfConfigMap(inForceJson);
    const served = inForce?.apis.length === 1 ? inForce.apis[0] : undefined;
    if (!inForce || !served) return undefined;
    const result = compileForApi(served.api_id, {
      apiDefinitions: inputs.allApis().map(asApi),
      policies: inputs.allPolicies().map(asPolicy),
      settings: this.#context.settings,
      cache: this.#context.cache,
      lastGoodApis: [served],
    });
    const policies = keepRefused(result.config.policies, refusedPolicyIds(result.problems), inForce.policies);
    const withPolicies = (kept: (id: string, policy: CompiledPolicy) => boolean): string =>
      JSON.stringify({ ...inForce, settings: result.config.settings, policies: Object.fromEntries(Object.entries(policies).filter(([id, policy]) => kept(id, policy))) });
    const now = withPolicies(() => true);
    if (Buffer.byteLength(now) <= maxBytes) return now;
    const held = withPolicies((id) => id in inForce.policies);
    if (Buffer.byteLength(held) <= maxBytes) return held;
    return withPolicies((id, policy) => id in inForce.policies && sameData(policy, inForce.policies[id]));
  }

  forget(namespace: string, name: string): void {
    this.#memo.delete(flatKey(namespace, name));
  }
}

/** What is wrong with one Policy (invalid spec, missing APIs, limits on ignored endpoints), compiling only the APIs it grants (`apis` may hold others). */
export function policyProblem(policy: Policy, apis: Api[]): Problem | undefined {
  const granted = new Set(grantedApiIds(policy));
  const relevant = apis.filter((api) => granted.has(apiIdOf(api)));
  const result = compile({ apiDefinitions: relevant.map(asApi), policies: [asPolicy(policy)] });
  const problems = result.problems.filter(isOf(policy, 'Policy'));
  const problem = summarize(problems);
  if (problem && problems.some((p) => policyRefusingReasons.has(p.reason))) {
    problem.message += '; the gateways keep the version compiled last (none, if it never compiled) until this is fixed';
  }
  return problem;
}
