import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fuzzParameters, fuzzTimeout } from '../../test/support/fuzz.ts';
import { jsonSchemaOf, validValues, type JsonSchema } from '../../test/support/schema-arbitrary.ts';
import { compiledConfigSchema } from '../compiled.ts';
import { apiDefinitionSpecSchema } from '../schemas/api-definition.ts';
import { policySpecSchema } from '../schemas/policy.ts';
import { ApiCompileCache, apiIdOf, compile, compileForApi, policyRefusingReasons, problemReasons, type ApiDefinitionInput, type CompileResult, type PolicyInput } from './index.ts';

/**
 * The compile step on arbitrary resources the schemas accept: it never throws, and every
 * resource either compiles or is reported with a Ready reason (what the operator writes
 * into its condition). Generated from the schemas themselves, so a new field is fuzzed as
 * soon as it exists.
 */

const RUNS = 100;

// A few names shared by generated APIs, policies and OAS documents, so references often resolve.
const apiIds = ['a', 'b', 'c'];
const operationIds = ['list', 'get', 'create'];

const specShape = jsonSchemaOf(apiDefinitionSpecSchema);
const specProperties = specShape.properties ?? {};
const pick = (names: readonly string[]): Record<string, JsonSchema> =>
  Object.fromEntries(Object.entries(specProperties).filter(([name]) => names.includes(name)));
const omit = (names: readonly string[]): Record<string, JsonSchema> =>
  Object.fromEntries(Object.entries(specProperties).filter(([name]) => !names.includes(name)));
const idOrGenerated: JsonSchema = { anyOf: [{ enum: apiIds }, specProperties.api_id!] };

/** Shared labels, so `proxy.rate_limit` often names an existing stream resource. */
function withLabels(shape: JsonSchema, field: string): JsonSchema {
  const labels: JsonSchema = { anyOf: [{ enum: ['', 'upstream'] }, shape.properties![field]!] };
  return { ...shape, properties: { ...shape.properties, [field]: labels } };
}
const resources = specProperties.rate_limit_resources!;

/** Classic definitions: everything but `oas`, with a proxy. */
const classicShape: JsonSchema = {
  ...specShape,
  properties: {
    ...omit(['oas']),
    api_id: idOrGenerated,
    proxy: withLabels(specProperties.proxy!, 'rate_limit'),
    rate_limit_resources: { ...resources, items: withLabels(resources.items!, 'label') },
  },
  required: ['proxy'],
};

/** An OpenAPI document whose paths define some of the operationIds its middleware names. */
function oasShape(): JsonSchema {
  const oas = specProperties.oas!;
  const gateway = oas.properties!['x-gw-api-gateway']!;
  const middleware = gateway.properties!.middleware!;
  const operations = middleware.properties!.operations!;
  const operation: JsonSchema = { type: 'object', properties: { operationId: { enum: operationIds } }, required: ['operationId'] };
  const pathItem: JsonSchema = { type: 'object', properties: { get: operation, post: operation, delete: operation, parameters: {} } };
  const paths: JsonSchema = { type: 'object', propertyNames: { anyOf: [{ enum: ['/items', '/items/{id}', '/x/{a}/{b}'] }, { type: 'string' }] }, additionalProperties: pathItem };
  return {
    ...specShape,
    properties: {
      ...pick(['api_id', 'name', 'categories']),
      api_id: idOrGenerated,
      oas: {
        ...oas,
        properties: {
          ...oas.properties,
          paths,
          'x-gw-api-gateway': {
            ...gateway,
            properties: {
              ...gateway.properties,
              middleware: {
                ...middleware,
                properties: { operations: { ...operations, propertyNames: { anyOf: [{ enum: operationIds }, { type: 'string', maxLength: 8 }] } } },
              },
            },
          },
        },
      },
    },
    required: ['oas'],
  };
}

const policyShape = jsonSchemaOf(policySpecSchema);
const accessRights = policyShape.properties!.access_rights!;
const grantingPolicyShape: JsonSchema = {
  ...policyShape,
  properties: { ...policyShape.properties, access_rights: { ...accessRights, propertyNames: { anyOf: [{ enum: apiIds }, accessRights.propertyNames!] } } },
};

const names = fc.constantFrom('one', 'two', 'three', 'four');
const namespaces = fc.constantFrom(undefined, 'default', 'team');
const meta = fc.record(
  { name: names, namespace: namespaces, creationTimestamp: fc.constantFrom(undefined, '2025-01-01T00:00:00Z', '2025-01-02T00:00:00Z') },
  { requiredKeys: ['name'] },
);
const spec = fc.oneof(validValues(apiDefinitionSpecSchema, classicShape), validValues(apiDefinitionSpecSchema, oasShape()));
const apiDefinitions = fc.uniqueArray(fc.record({ metadata: meta, spec }), {
  maxLength: 4,
  selector: (r) => `${r.metadata.namespace ?? 'default'}/${r.metadata.name}`,
}) as fc.Arbitrary<ApiDefinitionInput[]>;
const policies = fc.uniqueArray(fc.record({ metadata: meta, spec: validValues(policySpecSchema, grantingPolicyShape) }), {
  maxLength: 3,
  selector: (r) => `${r.metadata.namespace ?? 'default'}/${r.metadata.name}`,
}) as fc.Arbitrary<PolicyInput[]>;

const refKey = (ref: { kind: string; namespace: string; name: string }): string => `${ref.kind} ${ref.namespace}/${ref.name}`;

/** What holds of any compile result: a config the sidecar accepts, and problems the operator can report. */
function expectWellFormed(result: CompileResult): void {
  expect(compiledConfigSchema.safeParse(JSON.parse(JSON.stringify(result.config))).success).toBe(true);
  for (const problem of result.problems) {
    expect(Object.keys(problemReasons)).toContain(problem.reason);
    // Schema-valid input never fails the schema inside the compile step.
    expect(problem.reason).not.toBe('InvalidSpec');
    expect(problem.field.startsWith('spec')).toBe(true);
    expect(problem.message.length).toBeGreaterThan(0);
  }
  for (const api of result.config.apis) {
    for (const matcher of [...api.endpoint_limits, ...api.ignored]) expect(() => new RegExp(matcher.pattern)).not.toThrow();
  }
}

describe('compile on arbitrary valid resources (fuzz)', () => {
  it('never throws; each ApiDefinition compiles or carries a Ready reason; each Policy is compiled unless a problem refuses it whole', { timeout: fuzzTimeout(RUNS, 40) }, () => {
    fc.assert(
      fc.property(apiDefinitions, policies, (apis, pols) => {
        const result = compile({ apiDefinitions: apis, policies: pols });
        expectWellFormed(result);
        const served = new Set(result.config.apis.map((a) => refKey(a.source)));
        const reported = new Set(result.problems.map((p) => refKey(p.ref)));
        for (const resource of apis) {
          const ref = refKey({ kind: 'ApiDefinition', namespace: resource.metadata.namespace ?? 'default', name: resource.metadata.name });
          expect(served.has(ref) || reported.has(ref), `${ref} is neither compiled nor reported`).toBe(true);
        }
        const refused = new Set(result.problems.filter((p) => p.ref.kind === 'Policy' && policyRefusingReasons.has(p.reason)).map((p) => `${p.ref.namespace}/${p.ref.name}`));
        const policyIds = pols.map((p) => `${p.metadata.namespace ?? 'default'}/${p.metadata.name}`);
        expect(Object.keys(result.config.policies).sort()).toEqual(policyIds.filter((id) => !refused.has(id)).sort());
      }),
      fuzzParameters(RUNS),
    );
  });

  it('a cache carried from one compile to the next changes nothing either compiles', { timeout: fuzzTimeout(RUNS, 40) }, () => {
    fc.assert(
      fc.property(apiDefinitions, apiDefinitions, policies, fc.array(fc.constantFrom('same', 'renamed', 'moved', 'gone')), (first, added, pols, fates) => {
        const cache = new ApiCompileCache();
        expect(compile({ apiDefinitions: first, policies: pols, cache })).toEqual(compile({ apiDefinitions: first, policies: pols }));
        // The next compile meets the same spec objects, some under another name or namespace, beside new ones.
        const next = first.flatMap((resource, i): ApiDefinitionInput[] => {
          const fate = fates[i] ?? 'same';
          if (fate === 'gone') return [];
          const { name, namespace } = resource.metadata;
          const metadata = fate === 'renamed' ? { ...resource.metadata, name: `${name}-2` } : fate === 'moved' ? { ...resource.metadata, namespace: `${namespace ?? 'default'}-2` } : { ...resource.metadata };
          return [{ metadata, spec: resource.spec }];
        });
        const apis = [...next, ...added];
        expect(compile({ apiDefinitions: apis, policies: pols, cache })).toEqual(compile({ apiDefinitions: apis, policies: pols }));
      }),
      fuzzParameters(RUNS),
    );
  });

  it('compileForApi never throws and holds at most the API asked for', { timeout: fuzzTimeout(RUNS, 40) }, () => {
    fc.assert(
      fc.property(apiDefinitions, policies, fc.constantFrom(...apiIds, 'missing'), (apis, pols, apiId) => {
        const result = compileForApi(apiId, { apiDefinitions: apis, policies: pols });
        expectWellFormed(result);
        expect(result.config.apis.every((a) => a.api_id === apiId)).toBe(true);
        if (!apis.some((a) => apiIdOf(a) === apiId)) expect(result.config.apis).toEqual([]);
      }),
      fuzzParameters(RUNS),
    );
  });
});
