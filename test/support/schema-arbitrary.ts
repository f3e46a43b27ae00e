import fc from 'fast-check';
import { z } from 'zod';
import { anyText, trickyKeys } from './fuzz.ts';

/**
 * fast-check values shaped by a zod schema: the schema's JSON Schema (input side, so
 * defaulted fields may be left out) drives the generator, and the schema itself filters
 * the result, so only values it accepts come out (its cross-field rules included).
 * Collections stay small and numbers lean towards their bounds: what the code does with
 * a value depends on its edges, not its size.
 */

export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: JsonSchema | boolean;
  propertyNames?: JsonSchema;
  maxProperties?: number;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  format?: string;
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  'x-kubernetes-list-type'?: string;
  'x-kubernetes-list-map-keys'?: string[];
}

export const jsonSchemaOf = (schema: z.ZodType): JsonSchema =>
  z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any', reused: 'inline' }) as JsonSchema;

const MAX_ITEMS = 3;

function integerIn(min: number, max: number): fc.Arbitrary<number> {
  const near = (from: number, to: number) => fc.integer({ min: Math.max(min, from), max: Math.min(max, to) });
  return fc.oneof(near(min, min + 10), near(max - 10, max), fc.integer({ min, max }));
}

function numberArbitrary(schema: JsonSchema): fc.Arbitrary<number> {
  const min = schema.minimum ?? (schema.exclusiveMinimum === undefined ? -1e9 : schema.exclusiveMinimum);
  const max = schema.maximum ?? 1e9;
  if (schema.type === 'integer') return integerIn(Math.ceil(schema.exclusiveMinimum === undefined ? min : min + 1), max);
  return fc
    .double({ min, max, noNaN: true, noDefaultInfinity: true, minExcluded: schema.exclusiveMinimum !== undefined })
    .filter((n) => !Object.is(n, -0));
}

const httpUrl = fc
  .tuple(fc.constantFrom('http', 'https'), fc.domain(), fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }), fc.webPath())
  .map(([scheme, host, port, path]) => `${scheme}://${host}${port === undefined ? '' : `:${port}`}${path}`);

function stringArbitrary(schema: JsonSchema): fc.Arbitrary<string> {
  const min = schema.minLength ?? 0;
  const max = schema.maxLength ?? 64;
  let base: fc.Arbitrary<string>;
  if (schema.format === 'uri') base = httpUrl;
  else if (schema.pattern !== undefined) base = fc.stringMatching(new RegExp(schema.pattern), { size: 'small' });
  else base = anyText(Math.min(max, 24));
  return base.filter((s) => s.length >= min && s.length <= max);
}

function objectArbitrary(schema: JsonSchema): fc.Arbitrary<unknown> {
  const properties = schema.properties ?? {};
  if (Object.keys(properties).length > 0) {
    const record = Object.fromEntries(Object.entries(properties).map(([key, value]) => [key, arbitraryOf(value)]));
    return fc.record(record, { requiredKeys: schema.required ?? [], noNullPrototype: true });
  }
  const values = typeof schema.additionalProperties === 'object' ? arbitraryOf(schema.additionalProperties) : fc.jsonValue({ maxDepth: 2 });
  const keys = schema.propertyNames ? arbitraryOf(schema.propertyNames) : fc.oneof(anyText(12), fc.constantFrom(...trickyKeys));
  return fc.dictionary(keys as fc.Arbitrary<string>, values, { maxKeys: Math.min(schema.maxProperties ?? MAX_ITEMS, MAX_ITEMS), noNullPrototype: true });
}

function arrayArbitrary(schema: JsonSchema): fc.Arbitrary<unknown[]> {
  const item = schema.items ? arbitraryOf(schema.items) : fc.jsonValue({ maxDepth: 2 });
  const minLength = schema.minItems ?? 0;
  const maxLength = Math.max(minLength, Math.min(schema.maxItems ?? MAX_ITEMS, MAX_ITEMS));
  const mapKey = schema['x-kubernetes-list-type'] === 'map' ? schema['x-kubernetes-list-map-keys']?.[0] : undefined;
  if (mapKey === undefined) return fc.array(item, { minLength, maxLength });
  return fc.uniqueArray(item, { minLength, maxLength, selector: (v) => (v as Record<string, unknown>)[mapKey] });
}

/** An arbitrary for one JSON Schema node (the subset zod emits). */
export function arbitraryOf(schema: JsonSchema): fc.Arbitrary<unknown> {
  if (schema.anyOf) return fc.oneof(...schema.anyOf.map(arbitraryOf));
  if (schema.enum) return fc.constantFrom(...schema.enum);
  if (schema.const !== undefined) return fc.constant(schema.const);
  switch (schema.type) {
    case 'object':
      return objectArbitrary(schema);
    case 'array':
      return arrayArbitrary(schema);
    case 'string':
      return stringArbitrary(schema);
    case 'integer':
    case 'number':
      return numberArbitrary(schema);
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

/** Values the schema accepts, generated from `shape` (the schema's own JSON Schema unless a narrower one is given). */
export function validValues<S extends z.ZodType>(schema: S, shape: JsonSchema = jsonSchemaOf(schema)): fc.Arbitrary<z.input<S>> {
  return arbitraryOf(shape).filter((value) => schema.safeParse(value).success) as fc.Arbitrary<z.input<S>>;
}
