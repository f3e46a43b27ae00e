import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { compile, type ApiDefinitionInput, type PolicyInput } from '../../crds/compile/index.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const EXAMPLES = join(ROOT, 'examples');

interface Doc {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec: { access_rights?: Record<string, { api_id?: string }>; apply_policies?: string[] };
}

/** Each example's own `kubectl apply … -f examples/…` comment: the files it applies together. */
const commands = readdirSync(EXAMPLES)
  .filter((file) => file.endsWith('.yaml'))
  .sort()
  .map((file) => {
    const command = /^#\s+(kubectl apply .*)$/m.exec(readFileSync(join(EXAMPLES, file), 'utf8'))?.[1];
    return { file, files: [...(command ?? '').matchAll(/-f examples\/(\S+)/g)].map((match) => match[1]!) };
  });

const docsOf = (files: readonly string[]): Doc[] =>
  files.flatMap((file) => parseAllDocuments(readFileSync(join(EXAMPLES, file), 'utf8')).map((doc) => doc.toJS() as Doc));

describe('every example, applied with the command its comment gives, has what it names', () => {
  it('each example gives a command that applies it', () => {
    for (const { file, files } of commands) expect(files, file).toContain(file);
  });

  it.each(commands)('$file: its command compiles without a problem, and its Keys name only APIs and Policies it applies', ({ files }) => {
    const docs = docsOf(files);
    const ofKind = (kind: string) => docs.filter((doc) => doc.kind === kind).map((doc) => ({ ...doc, metadata: { namespace: 'demo', ...doc.metadata } }));
    const { config, problems } = compile({ apiDefinitions: ofKind('ApiDefinition') as unknown as ApiDefinitionInput[], policies: ofKind('Policy') as unknown as PolicyInput[] });
    expect(problems).toEqual([]);
    const apiIds = new Set(config.apis.map((api) => api.api_id));
    const policyNames = new Set(ofKind('Policy').map((policy) => policy.metadata.name));
    for (const key of ofKind('Key')) {
      for (const [name, right] of Object.entries(key.spec.access_rights ?? {})) expect(apiIds, `${key.metadata.name} grants ${name}`).toContain(right.api_id ?? name);
      for (const policy of key.spec.apply_policies ?? []) expect(policyNames, `${key.metadata.name} applies ${policy}`).toContain(policy);
    }
  });
});
