import { z } from 'zod';

/**
 * zod → Kubernetes structural OpenAPI v3 (apiextensions.k8s.io/v1). zod's own JSON Schema
 * output (OpenAPI 3.0 target, input side so defaults show) is rewritten where Kubernetes
 * is stricter: no $ref, no `additionalProperties` beside `properties`, free-form objects
 * marked `x-kubernetes-preserve-unknown-fields`, integers given a format and stripped of
 * JS's safe-integer bounds.
 */

export type JsonSchema = { [key: string]: unknown };

const safe = Number.MAX_SAFE_INTEGER;

const isObject = (v: unknown): v is JsonSchema => typeof v === 'object' && v !== null && !Array.isArray(v);

function isFreeForm(v: unknown): boolean {
  return v === true || (isObject(v) && Object.keys(v).length === 0);
}

function fixInteger(s: JsonSchema): void {
  if (s.type !== 'integer') return;
  if (typeof s.maximum === 'number' && s.maximum >= safe) delete s.maximum;
  if (typeof s.minimum === 'number' && s.minimum <= -safe) delete s.minimum;
  s.format = 'int64';
}

function fixObject(s: JsonSchema): void {
  const extra = s.additionalProperties;
  if (extra === undefined) return;
  if (extra === false) {
    // The API server prunes unknown fields anyway; `false` is not structural.
    delete s.additionalProperties;
  } else if (isFreeForm(extra)) {
    delete s.additionalProperties;
    s.type = 'object';
    s['x-kubernetes-preserve-unknown-fields'] = true;
  }
}

function fixUntyped(s: JsonSchema): void {
  if (s.type === undefined && s['x-kubernetes-int-or-string'] === undefined) {
    s['x-kubernetes-preserve-unknown-fields'] = true;
  }
}

function walk(node: JsonSchema): JsonSchema {
  if ('$ref' in node || 'allOf' in node || 'anyOf' in node || 'oneOf' in node) {
    throw new Error(`not expressible as a structural schema: ${JSON.stringify(node).slice(0, 200)}`);
  }
  delete node.$schema;
  fixInteger(node);
  fixObject(node);
  fixUntyped(node);
  if (isObject(node.properties)) {
    for (const child of Object.values(node.properties)) walk(child as JsonSchema);
  }
  if (isObject(node.additionalProperties)) walk(node.additionalProperties);
  if (isObject(node.items)) walk(node.items);
  return node;
}

export function toStructural(schema: z.ZodType): JsonSchema {
  const json = z.toJSONSchema(schema, { target: 'openapi-3.0', io: 'input', reused: 'inline', unrepresentable: 'throw' });
  return walk(json as JsonSchema);
}
