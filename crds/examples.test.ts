import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { compiledConfigSchema } from './compiled.ts';
import { compile, type ApiDefinitionInput, type PolicyInput } from './compile/index.ts';
import { kindNames, type KindName } from './kinds.ts';
import { resourceSchemas } from './schemas/index.ts';

const dir = join(import.meta.dirname, '..', 'examples');
const files = readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort();
const docs = files.flatMap((file) =>
  parseAllDocuments(readFileSync(join(dir, file), 'utf8')).map((d) => ({ file, resource: d.toJS() as { kind: KindName; metadata: { name: string; namespace?: string } } })),
);

describe('examples/', () => {
  it('has one file per feature a user tries first', () => {
    expect(files).toEqual([
      'auth-token-api.yaml',
      'categories.yaml',
      'custom-rate-limit-key.yaml',
      'key-two-policies.yaml',
      'keyless-api.yaml',
      'oas-api.yaml',
      'policy-limits.yaml',
      'portal-product.yaml',
      'smoothing.yaml',
      'stream-rate-limit.yaml',
    ]);
  });

  it.each(docs.map((d) => [`${d.file}: ${d.resource.kind}/${d.resource.metadata.name}`, d.resource] as const))(
    '%s is a valid namespace-less resource',
    (_name, resource) => {
      expect(kindNames).toContain(resource.kind);
      expect(resource.metadata.namespace).toBeUndefined();
      const parsed = resourceSchemas[resource.kind].safeParse(resource);
      expect(parsed.success ? [] : parsed.error.issues).toEqual([]);
    },
  );

  it('compile together without a problem, every API and policy included', () => {
    const of = <T>(kind: KindName) => docs.filter((d) => d.resource.kind === kind).map((d) => d.resource as unknown as T);
    const apis = of<ApiDefinitionInput>('ApiDefinition');
    const policies = of<PolicyInput>('Policy');
    const { config, problems } = compile({ apiDefinitions: apis, policies });
    expect(problems).toEqual([]);
    expect(compiledConfigSchema.parse(config)).toEqual(config);
    expect(config.apis).toHaveLength(apis.length);
    expect(Object.keys(config.policies)).toHaveLength(policies.length);
    expect(new Set(config.apis.map((a) => a.listen_path)).size).toBe(apis.length);
  });

  it('point the demo APIs at the local demo upstream', () => {
    const { config } = compile({ apiDefinitions: docs.filter((d) => d.resource.kind === 'ApiDefinition').map((d) => d.resource as unknown as ApiDefinitionInput), policies: [] });
    const byId = new Map(config.apis.map((a) => [a.api_id, a]));
    expect(byId.get('keyless-api')).toMatchObject({ keyless: true, target_url: 'http://127.0.0.1:9000', api_limit: { rate: 5, per: 10 } });
    expect(byId.get('auth-token-api')).toMatchObject({ keyless: false, target_url: 'http://127.0.0.1:9000' });
  });
});
