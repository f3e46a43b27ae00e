import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledConfigSchema } from '../../../crds/compiled.ts';
import { compile, type ApiDefinitionInput, type PolicyInput } from '../../../crds/compile/index.ts';
import { crdName, kindNames, kinds } from '../../../crds/kinds.ts';
import { createNamespace, kubectl } from '../../harness/index.ts';

const examples = join(import.meta.dirname, '..', '..', '..', 'examples');
const exampleFiles = readdirSync(examples).filter((f) => f.endsWith('.yaml')).sort();

interface Item {
  kind: string;
  metadata: { name: string; namespace: string; generation: number };
  spec: Record<string, unknown>;
}

async function list(namespace: string, resources: string): Promise<Item[]> {
  const { stdout } = await kubectl(['get', resources, '-n', namespace, '-o', 'json']);
  return (JSON.parse(stdout) as { items: Item[] }).items;
}

describe('CRDs on the real API server', () => {
  it.each(kindNames)('%s: the generated CRD is established and structural', async (kind) => {
    const { stdout } = await kubectl(['get', 'crd', crdName(kinds[kind]), '-o', 'json']);
    const crd = JSON.parse(stdout) as { status: { conditions: { type: string; status: string }[] }; spec: { names: { shortNames: string[]; categories: string[] } } };
    const conditions = Object.fromEntries(crd.status.conditions.map((c) => [c.type, c.status]));
    expect(conditions).toMatchObject({ Established: 'True', NamesAccepted: 'True' });
    expect(conditions.NonStructuralSchema).toBeUndefined();
    expect(crd.spec.names).toMatchObject({ shortNames: [kinds[kind].shortName], categories: ['gw'] });
  });

  it('kubectl explain teaches the fields from the zod descriptions', async () => {
    const { stdout } = await kubectl(['explain', 'apidefinition.spec.global_rate_limit']);
    expect(stdout).toContain('API-level rate limit');
    expect(stdout).toMatch(/per\s+<integer>/);
    expect(stdout).toContain('Window length in seconds');
    const key = await kubectl(['explain', 'gwkey.spec.key_hash']);
    expect(key.stdout).toContain('Hex SHA-256 of the raw key');
  });
});

describe('examples on the real API server', () => {
  let namespace: string;
  beforeAll(async () => {
    namespace = await createNamespace('crd-examples');
  });
  // Examples carry fixed api_ids; left behind, they would collide with later test files' copies.
  afterAll(async () => {
    await kubectl(['delete', 'gw', '--all', '-n', namespace, '--wait=false']);
  });

  it.each(exampleFiles)('kubectl apply -n <ns> -f examples/%s succeeds', async (file) => {
    const { stdout } = await kubectl(['apply', '-n', namespace, '-f', join(examples, file)]);
    const created = stdout.trim().split('\n');
    const documents = readFileSync(join(examples, file), 'utf8').split(/^---$/m).length;
    expect(created).toHaveLength(documents);
    for (const line of created) expect(line).toMatch(/^[a-z]+\.gw\.dev\/[a-z0-9-]+ (created|configured|unchanged)$/);
  });

  it('kubectl get gw lists all five kinds', async () => {
    const { stdout } = await kubectl(['get', 'gw', '-n', namespace, '-o', 'name']);
    const kindsListed = new Set(stdout.trim().split('\n').map((line) => line.split('/')[0]));
    expect(kindsListed).toEqual(new Set(kindNames.map((k) => `${kinds[k].singular}.gw.dev`)));
    const table = await kubectl(['get', 'gwapi', '-n', namespace]);
    // The columns read the status, which no operator writes here (test/integration/operator/reconcile.test.ts has them filled in).
    expect(table.stdout.split('\n')[0]).toMatch(/^NAME\s+API ID\s+LISTEN PATH\s+RATE LIMIT\s+READY\s+AGE$/);
    expect(table.stdout).toMatch(/^keyless-api\s/m);
  });

  it('read back from the API server (server defaults applied), the examples compile without a problem', async () => {
    const apis = await list(namespace, 'apidefinitions');
    const policies = await list(namespace, 'policies');
    expect(apis.map((a) => a.metadata.name).sort()).toEqual(['auth-token-api', 'billing-api', 'keyless-api', 'oas-api', 'stream-limited-api']);
    const { config, problems } = compile({ apiDefinitions: apis as unknown as ApiDefinitionInput[], policies: policies as unknown as PolicyInput[] });
    expect(problems).toEqual([]);
    expect(compiledConfigSchema.parse(config).apis).toHaveLength(5);
    expect(config.apis.every((a) => a.source.namespace === namespace)).toBe(true);
    const billing = apis.find((a) => a.metadata.name === 'billing-api')!;
    // strip_listen_path is left out of the example: the API server filled in the CRD default.
    expect(billing.spec.proxy).toMatchObject({ strip_listen_path: true });
  });
});
