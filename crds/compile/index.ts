import type { z } from 'zod';
import { byApiId, type CompiledApi, type CompiledConfig, type CompiledPolicy, type ResourceRef } from '../compiled.ts';
import { policyCoversApi } from '../policy-coverage.ts';
import { apiDefinitionSpecSchema } from '../schemas/api-definition.ts';
import { policySpecSchema } from '../schemas/policy.ts';
import { gatewaySettingsSchema, type GatewaySettings } from '../settings.ts';
import { apiBase } from './api-base.ts';
import { compileClassicApi } from './api-classic.ts';
import { apiIdOf, defaultNamespace } from './api-id.ts';
import { compileOasApi } from './api-oas.ts';
import { compilePolicy, type GrantedApi } from './policy.ts';
import { unknownFields } from '../openapi/unknown-fields.ts';
import { policyRefusingReasons, type CompileProblem } from './problems.ts';

/**
 * The pure compile step (docs/architecture.md#the-flow-of-a-resource): custom resources → the configuration a sidecar runs.
 * No I/O. Every spec is re-validated with its zod schema (resources can bypass the CRD:
 * folder mode, objects stored before a CRD upgrade), every default is applied, every
 * reference is resolved or reported. An API with a problem is left out whole; so is a policy
 * with a problem that would loosen it (`policyRefusingReasons`), and any other policy keeps
 * everything but the parts with problems.
 */

export type { CompileProblem, ProblemReason } from './problems.ts';
export { policyRefusingReasons, problemReasons } from './problems.ts';
export { apiIdOf, defaultApiId } from './api-id.ts';

interface Meta {
  name: string;
  namespace?: string | undefined;
  uid?: string | undefined;
  /** Set by the API server; the older of two ApiDefinitions claiming one api_id keeps it. */
  creationTimestamp?: string | Date | undefined;
}
export interface ApiDefinitionInput {
  metadata: Meta;
  spec: z.input<typeof apiDefinitionSpecSchema>;
}
export interface PolicyInput {
  metadata: Meta;
  spec: z.input<typeof policySpecSchema>;
}
export interface CompileInput {
  apiDefinitions: readonly ApiDefinitionInput[];
  policies: readonly PolicyInput[];
  /** Gateway settings; must satisfy gatewaySettingsSchema (it throws otherwise, as for any caller bug). */
  settings?: Partial<GatewaySettings>;
  /** APIs compiled by earlier calls, for a caller that compiles mostly the same resources again (ApiCompileCache). */
  cache?: ApiCompileCache;
  /**
   * APIs deleted from the store and still served until a reload (docs/behaviour.md#api-states):
   * a policy's grant of one compiles against it, as while its resource was there. They are
   * not put in the result's `apis`: the caller serves them on.
   */
  retainedApis?: readonly CompiledApi[];
  /**
   * The APIs as the caller served them last. An API whose resource is there but refused keeps
   * its last good version (docs/behaviour.md#bad-edits), and a policy's grant of it compiles
   * against that version rather than being reported missing.
   */
  lastGoodApis?: readonly CompiledApi[];
}
export interface CompileResult {
  config: CompiledConfig;
  problems: CompileProblem[];
}

function refOf(kind: string, meta: Meta): ResourceRef {
  return { kind, namespace: meta.namespace ?? defaultNamespace, name: meta.name, ...(meta.uid ? { uid: meta.uid } : {}) };
}

const byNamespacedName = <T extends { metadata: Meta }>(a: T, b: T): number =>
  `${a.metadata.namespace ?? defaultNamespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace ?? defaultNamespace}/${b.metadata.name}`);

const createdAt = (meta: Meta): string =>
  meta.creationTimestamp instanceof Date ? meta.creationTimestamp.toISOString() : (meta.creationTimestamp ?? '');

/** Oldest first, so a newcomer never takes an api_id from an API already serving it. */
const byAge = <T extends { metadata: Meta }>(a: T, b: T): number =>
  createdAt(a.metadata).localeCompare(createdAt(b.metadata)) || byNamespacedName(a, b);

/**
 * Which of several ApiDefinitions claiming one api_id holds it: the one that served it last
 * (a folder has no creation times, and a newcomer named earlier must not take it over); else
 * one that compiles over one that could never be served as written, whatever made it so (its
 * schema, a regular expression, an OAS path): a broken copy must not take a working API down
 * at a restart, nor keep a valid newcomer from serving; else the oldest.
 */
function byClaim(claimants: readonly ApiDefinitionInput[], server: string | undefined, compiles: (resource: ApiDefinitionInput) => boolean): (a: ApiDefinitionInput, b: ApiDefinitionInput) => number {
  const rank = new Map(
    claimants.map((resource): [ApiDefinitionInput, number] => [
      resource,
      (`${resource.metadata.namespace ?? defaultNamespace}/${resource.metadata.name}` === server ? 0 : 2) + (compiles(resource) ? 0 : 1),
    ]),
  );
  return (a, b) => rank.get(a)! - rank.get(b)! || byAge(a, b);
}

/** A spec's fields its kind does not define, each a problem that refuses the resource (crds/openapi/unknown-fields.ts). */
function unknownFieldProblems(ref: ResourceRef, schema: z.ZodType, spec: unknown): CompileProblem[] {
  return unknownFields(schema, spec).map((field) => ({
    ref,
    field: `spec.${field}`,
    reason: 'UnknownField',
    message: `${ref.kind} has no field "${field}" (misspelt?); kubectl apply refuses it too`,
  }));
}

/**
 * One problem per field: the first the schema found. A field can fail several checks at once
 * (a count of -1 is under the shared bound of 0 and the stream's own 1), and one says it.
 */
function invalidSpec(ref: ResourceRef, error: z.ZodError): CompileProblem[] {
  const byField = new Map<string, CompileProblem>();
  for (const issue of error.issues) {
    const field = ['spec', ...issue.path.map(String)].join('.');
    if (!byField.has(field)) byField.set(field, { ref, field, reason: 'InvalidSpec', message: issue.message });
  }
  return [...byField.values()];
}

interface ApiEntry {
  granted: GrantedApi | undefined;
  api: CompiledApi | null;
  problems: CompileProblem[];
}

/** What a cached entry was compiled under, besides its spec object. */
interface CachedApi {
  name: string;
  namespace: string | undefined;
  uid: string | undefined;
  apiId: string;
  entry: ApiEntry;
}

/**
 * APIs compiled by earlier calls, by their spec object. The folder source compiles every
 * ApiDefinition of its folder on each reload, and each Key the admin operations write
 * reloads it: at 5,000 APIs, validating and compiling them all again held the event loop
 * for about 60 ms (docs/architecture.md#performance). An API whose spec is the same object,
 * under the same name, namespace, uid and api_id, is compiled to what it was compiled to
 * then. Specs are never changed in place: a changed resource is a new object (a file is
 * parsed again when its text changes, an informer replaces an object it updates).
 */
export class ApiCompileCache {
  readonly #bySpec = new WeakMap<object, CachedApi>();

  entry(resource: ApiDefinitionInput, apiId: string): ApiEntry {
    const spec: unknown = resource.spec;
    if (typeof spec !== 'object' || spec === null) return compileApi(resource, apiId);
    const { name, namespace, uid } = resource.metadata;
    const cached = this.#bySpec.get(spec);
    if (cached?.name === name && cached.namespace === namespace && cached.uid === uid && cached.apiId === apiId) return cached.entry;
    const entry = compileApi(resource, apiId);
    this.#bySpec.set(spec, { name, namespace, uid, apiId, entry });
    return entry;
  }
}

function compileApi(resource: ApiDefinitionInput, apiId: string): ApiEntry {
  const ref = refOf('ApiDefinition', resource.metadata);
  const parsed = apiDefinitionSpecSchema.safeParse(resource.spec);
  if (!parsed.success) return { granted: undefined, api: null, problems: invalidSpec(ref, parsed.error) };
  const unknown = unknownFieldProblems(ref, apiDefinitionSpecSchema, resource.spec);
  if (unknown.length > 0) return { granted: undefined, api: null, problems: unknown };
  const spec = parsed.data;
  const oas = spec.oas;
  const title = typeof oas?.info?.title === 'string' ? oas.info.title : undefined;
  const name = spec.name ?? oas?.['x-gw-api-gateway'].info?.name ?? title ?? resource.metadata.name;
  const base = apiBase(ref, apiId, name, spec.categories);
  const result = oas ? compileOasApi(oas, base) : compileClassicApi(spec, spec.proxy!, base);
  return { granted: { name, ref, ignored: result.api?.ignored ?? [] }, ...result };
}

/** APIs by api_id; each compiled at most once, and only when asked for. */
function apiCatalogue(apiDefinitions: readonly ApiDefinitionInput[], cache: ApiCompileCache | undefined, lastGoodApis: readonly CompiledApi[] | undefined) {
  const byId = new Map<string, ApiDefinitionInput[]>();
  for (const resource of apiDefinitions) {
    const id = apiIdOf(resource);
    const claimants = byId.get(id);
    if (claimants) claimants.push(resource);
    else byId.set(id, [resource]);
  }
  // The claim is settled only among the claimants of one api_id: sorting every API by age (a
  // collation per comparison) took 10 ms at 5,000 APIs, on each reload of a folder.
  const compileOf = (resource: ApiDefinitionInput, apiId: string): ApiEntry => (cache ? cache.entry(resource, apiId) : compileApi(resource, apiId));
  const compiled = new Map<string, ApiEntry>();
  let servedBy: Map<string, string> | undefined;
  for (const [apiId, claimants] of byId) {
    if (claimants.length < 2) continue;
    servedBy ??= new Map((lastGoodApis ?? []).map((api): [string, string] => [api.api_id, `${api.source.namespace}/${api.source.name}`]));
    // Each claimant is compiled to rank it; the holder's compile is the api_id's.
    const entries = new Map(claimants.map((resource) => [resource, compileOf(resource, apiId)]));
    claimants.sort(byClaim(claimants, servedBy.get(apiId), (resource) => entries.get(resource)!.api !== null));
    compiled.set(apiId, entries.get(claimants[0]!)!);
  }
  const entry = (apiId: string): ApiEntry | undefined => {
    const owner = byId.get(apiId)?.[0];
    if (!owner) return undefined;
    let found = compiled.get(apiId);
    if (!found) {
      found = compileOf(owner, apiId);
      compiled.set(apiId, found);
    }
    return found;
  };
  const duplicates = (apiId: string): CompileProblem[] => {
    const claimants = byId.get(apiId) ?? [];
    if (claimants.length < 2) return [];
    const [owner, ...others] = claimants;
    return others.map((resource) => ({
      ref: refOf('ApiDefinition', resource.metadata),
      field: 'spec.api_id',
      reason: 'DuplicateApiId',
      message: `api_id "${apiId}" is already used by ApiDefinition ${owner!.metadata.namespace ?? defaultNamespace}/${owner!.metadata.name}`,
    }));
  };
  return { ids: [...byId.keys()].sort(byApiId), entry, duplicates };
}

type Catalogue = ReturnType<typeof apiCatalogue>;

const grantedOf = (apis: readonly CompiledApi[] | undefined) =>
  new Map((apis ?? []).map((api): [string, GrantedApi] => [api.api_id, { name: api.name, ref: api.source, ignored: api.ignored }]));

function compilePolicies(policies: readonly PolicyInput[], catalogue: Catalogue, input: CompileInput) {
  const out: Record<string, CompiledPolicy> = {};
  const problems: CompileProblem[] = [];
  const retained = grantedOf(input.retainedApis);
  const lastGood = grantedOf(input.lastGoodApis);
  const lookup = (apiId: string): GrantedApi | undefined => {
    const entry = catalogue.entry(apiId);
    return entry?.granted ?? (entry ? lastGood.get(apiId) : undefined) ?? retained.get(apiId);
  };
  for (const resource of [...policies].sort(byNamespacedName)) {
    const ref = refOf('Policy', resource.metadata);
    const parsed = policySpecSchema.safeParse(resource.spec);
    if (!parsed.success) {
      problems.push(...invalidSpec(ref, parsed.error));
      continue;
    }
    const unknown = unknownFieldProblems(ref, policySpecSchema, resource.spec);
    if (unknown.length > 0) {
      problems.push(...unknown);
      continue;
    }
    const compiled = compilePolicy(ref, parsed.data, lookup);
    problems.push(...compiled.problems);
    if (compiled.problems.some((p) => policyRefusingReasons.has(p.reason))) continue;
    out[compiled.policy.id] = compiled.policy;
  }
  return { policies: out, problems };
}

function assemble(apiIds: readonly string[], policies: readonly PolicyInput[], catalogue: Catalogue, input: CompileInput): CompileResult {
  const apis: CompiledApi[] = [];
  const problems: CompileProblem[] = [];
  for (const apiId of apiIds) {
    const entry = catalogue.entry(apiId);
    if (entry?.api) apis.push(entry.api);
    if (entry !== undefined && entry.problems.length > 0) problems.push(...entry.problems);
    problems.push(...catalogue.duplicates(apiId));
  }
  const compiled = compilePolicies(policies, catalogue, input);
  return {
    config: { version: 1, settings: gatewaySettingsSchema.parse(input.settings ?? {}), apis, policies: compiled.policies },
    problems: [...problems, ...compiled.problems],
  };
}

/** Every API and policy of the input. */
export function compile(input: CompileInput): CompileResult {
  const catalogue = apiCatalogue(input.apiDefinitions, input.cache, input.lastGoodApis);
  return assemble(catalogue.ids, input.policies, catalogue, input);
}

/**
 * What one API's ConfigMap holds: that API and every policy covering it (each policy
 * whole, with its grants of other APIs, since its global allowance spans them all).
 * Only the APIs those policies touch are compiled.
 */
export function compileForApi(apiId: string, input: CompileInput): CompileResult {
  const catalogue = apiCatalogue(input.apiDefinitions, input.cache, input.lastGoodApis);
  const covering = input.policies.filter((p) => policyCoversApi(p.spec?.access_rights ?? {}, apiId));
  return assemble([apiId], covering, catalogue, input);
}
