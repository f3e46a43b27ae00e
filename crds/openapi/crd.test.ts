import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { kindSources } from '../schemas/index.ts';
import { buildCrd, crdDirs, renderCrds } from './crd.ts';
import type { JsonSchema } from './structural.ts';

const root = join(import.meta.dirname, '..', '..');
const rendered = renderCrds(kindSources);

type Visit = (node: JsonSchema, path: string) => void;

/** Visits every schema node below a CRD's openAPIV3Schema.properties.spec/status. */
function walk(node: JsonSchema, path: string, visit: Visit): void {
  visit(node, path);
  for (const [name, child] of Object.entries((node.properties ?? {}) as Record<string, JsonSchema>)) walk(child, `${path}.${name}`, visit);
  if (typeof node.additionalProperties === 'object') walk(node.additionalProperties as JsonSchema, `${path}[*]`, visit);
  if (typeof node.items === 'object') walk(node.items as JsonSchema, `${path}[]`, visit);
}

function rootSchema(kind: string): JsonSchema {
  const source = kindSources.find((s) => s.info.kind === kind)!;
  const crd = buildCrd(source) as { spec: { versions: { schema: { openAPIV3Schema: JsonSchema } }[] } };
  return crd.spec.versions[0]!.schema.openAPIV3Schema;
}

function allNodes(kind: string): [string, JsonSchema][] {
  const nodes: [string, JsonSchema][] = [];
  const props = rootSchema(kind).properties as Record<string, JsonSchema>;
  for (const part of ['spec', 'status']) walk(props[part]!, part, (node, path) => nodes.push([path, node]));
  return nodes;
}

const celRules = (node: JsonSchema): string[] => ((node['x-kubernetes-validations'] ?? []) as { rule: string }[]).map((r) => r.rule);

describe('generated CRDs', () => {
  it.each(crdDirs)('the committed YAML in %s is what `npm run generate` writes', (dir) => {
    for (const [file, text] of rendered) {
      expect(readFileSync(join(root, dir, file), 'utf8'), `${dir}/${file} is stale: run npm run generate`).toBe(text);
    }
  });

  it.each(kindSources.map((s) => s.info.kind))('%s: every field has a description and the schema is structural', (kind) => {
    for (const [path, node] of allNodes(kind)) {
      if (!path.endsWith('[]') && !path.endsWith('[*]')) expect(node.description, `${path} has no description`).toEqual(expect.any(String));
      expect(node.type !== undefined || node['x-kubernetes-preserve-unknown-fields'] === true, `${path} has no type`).toBe(true);
      expect(node.properties !== undefined && node.additionalProperties !== undefined, `${path}: properties with additionalProperties`).toBe(false);
      expect(node.$ref ?? node.anyOf ?? node.oneOf ?? node.allOf, `${path} is not structural`).toBeUndefined();
      if (node.type === 'string' && !node.enum) expect(node.maxLength ?? node.format, `${path} has no maxLength`).toBeDefined();
      if (node.type === 'array') expect(node.maxItems, `${path} has no maxItems`).toEqual(expect.any(Number));
      if (node.type === 'integer') expect(node.format).toBe('int64');
    }
  });

  it('carries the cross-field CEL rules where both fields live on one object', () => {
    const spec = (rootSchema('ApiDefinition').properties as Record<string, JsonSchema>).spec!;
    expect(celRules(spec)).toEqual([
      'has(self.oas) || has(self.proxy)',
      expect.stringMatching(/^!has\(self\.oas\) \|\| !\(has\(self\.use_keyless\) \|\| .*has\(self\.proxy\)/),
    ]);
    const global = (spec.properties as Record<string, JsonSchema>).global_rate_limit!;
    expect(celRules(global)).toEqual([
      'has(self.rate) == has(self.per)',
      '!has(self.rate) || self.rate == 0 || (has(self.per) && self.per > 0)',
      '!has(self.smoothing) || !has(self.smoothing.enabled) || !self.smoothing.enabled || !has(self.smoothing.threshold) || !has(self.rate) || self.rate == 0 || self.smoothing.threshold <= self.rate',
    ]);
    const smoothingNode = allNodes('Policy').find(([p]) => p === 'spec.smoothing')![1];
    expect(celRules(smoothingNode)).toEqual([
      'has(self.enabled) && self.enabled ? has(self.threshold) && self.threshold >= 1 : !has(self.threshold) || self.threshold >= 0',
      'has(self.enabled) && self.enabled ? has(self.step) && self.step >= 1 : !has(self.step) || self.step >= 0',
      'has(self.enabled) && self.enabled ? has(self.trigger) && self.trigger > 0.0 : !has(self.trigger) || self.trigger >= 0.0',
      '!has(self.enabled) || !self.enabled || has(self.delay)',
    ]);
    expect(smoothingNode.required).toBeUndefined();
    const policy = (rootSchema('Policy').properties as Record<string, JsonSchema>).spec!;
    expect(celRules(policy)).toHaveLength(3);
    const trigger = allNodes('Policy').find(([p]) => p === 'spec.smoothing.trigger')![1];
    // Its bound is the rule's alone: a minimum beside it would be a second message for one value.
    expect(trigger).toMatchObject({ type: 'number' });
    expect(trigger.minimum).toBeUndefined();
  });

  it('marks free-form objects, enums, defaults and list maps', () => {
    const nodes = new Map(allNodes('ApiDefinition'));
    expect(nodes.get('spec.oas')).toMatchObject({ type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    expect(nodes.get('spec.oas.paths')).toMatchObject({ type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    expect(nodes.get('spec.extended_paths.rate_limit[].method')!.enum).toContain('DELETE');
    expect(nodes.get('spec.rate_limit_resources[].local.count')).toMatchObject({ default: 1000, minimum: 1 });
    expect(nodes.get('spec.rate_limit_resources[].local.interval')).toMatchObject({ default: '1s' });
    expect(nodes.get('spec.auth.auth_header_name')).toMatchObject({ default: 'Authorization' });
    expect(nodes.get('spec.rate_limit_resources')).toMatchObject({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['label'] });
    expect(new Map(allNodes('Key')).get('spec.meta_data')).toMatchObject({ type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    expect(new Map(allNodes('Key')).get('spec.key_hash')).toMatchObject({ pattern: '^[0-9a-f]{64}$' });
  });

  it('declares names, short names, the gw category, the status subresource and printer columns', () => {
    const expected = { ApiDefinition: 'gwapi', Policy: 'gwpol', Key: 'gwkey', Category: 'gwcat', PortalProduct: 'gwprod' };
    for (const [file, text] of rendered) {
      const crd = parse(text);
      const kind = crd.spec.names.kind as keyof typeof expected;
      expect(file).toBe(`${crd.spec.names.plural}.gw.dev.yaml`);
      expect(crd.spec.names.shortNames).toEqual([expected[kind]]);
      expect(crd.spec.names.categories).toEqual(['gw']);
      expect(crd.spec.scope).toBe('Namespaced');
      const version = crd.spec.versions[0];
      expect(version).toMatchObject({ name: 'v1alpha1', served: true, storage: true, subresources: { status: {} } });
      const columns = version.additionalPrinterColumns as { name: string; priority?: number }[];
      expect(columns.map((c) => c.name)).toEqual(expect.arrayContaining(['READY', 'REASON', 'AGE']));
      // The Ready condition's reason only under -o wide.
      expect(columns.filter((c) => c.priority === 1).map((c) => c.name)).toEqual(['REASON']);
    }
    const api = parse(rendered.get('apidefinitions.gw.dev.yaml')!);
    expect(api.spec.versions[0].additionalPrinterColumns.map((c: { name: string }) => c.name)).toEqual(['API ID', 'LISTEN PATH', 'RATE LIMIT', 'READY', 'REASON', 'AGE']);
  });
});
