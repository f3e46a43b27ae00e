import type { z } from 'zod';
import { isRecord } from '../is-record.ts';
import { toStructural, type JsonSchema } from './structural.ts';

/**
 * Fields of a spec its kind's schema does not have: what `kubectl apply` refuses (its field
 * validation is strict) before the API server would prune them. A zod parse drops them
 * silently, so a misspelt `global_rate_limt` in a folder left the API unlimited. The check
 * walks the CRD's own structural schema, so it knows exactly the fields the API server does,
 * free-form parts (`x-kubernetes-preserve-unknown-fields`: an OAS document, `meta_data`) included.
 */

const structural = new WeakMap<z.ZodType, JsonSchema>();

function structuralOf(schema: z.ZodType): JsonSchema {
  let found = structural.get(schema);
  if (found === undefined) {
    found = toStructural(schema);
    structural.set(schema, found);
  }
  return found;
}

function walk(schema: JsonSchema, value: unknown, path: string, out: string[]): void {
  if (Array.isArray(value)) {
    if (isRecord(schema.items)) value.forEach((item, i) => walk(schema.items as JsonSchema, item, `${path}[${i}]`, out));
    return;
  }
  if (!isRecord(value)) return;
  const properties = isRecord(schema.properties) ? schema.properties : undefined;
  const entries = isRecord(schema.additionalProperties) ? schema.additionalProperties : undefined;
  const free = schema['x-kubernetes-preserve-unknown-fields'] === true;
  for (const [name, child] of Object.entries(value)) {
    const field = path === '' ? name : `${path}.${name}`;
    const known = properties?.[name];
    if (isRecord(known)) walk(known, child, field, out);
    else if (entries) walk(entries, child, `${path}["${name}"]`, out);
    else if (!free) out.push(field);
  }
}

/** Paths (`proxy.listen_pth`, `access_rights["a"].limt`) of the fields in `spec` that `schema` does not define. */
export function unknownFields(schema: z.ZodType, spec: unknown): string[] {
  const out: string[] = [];
  walk(structuralOf(schema), spec, '', out);
  return out;
}
