import { parse } from 'yaml';
import { staticTokensSchema, type StaticToken } from './bearer.ts';

/**
 * Standalone bearer tokens for the category reads, from a YAML or JSON list
 * (`[{name, token, permissions: ["get:apidefinitions", …]}]`). An invalid list fails with
 * the entry and field at fault, so the sidecar can refuse to start on it.
 */
export function parseStaticTokens(text: string, source: string): StaticToken[] {
  let value: unknown;
  try {
    value = parse(text);
  } catch (error) {
    throw new Error(`${source}: not YAML or JSON: ${(error as Error).message}`, { cause: error });
  }
  const parsed = staticTokensSchema.safeParse(value ?? []);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  throw new Error(`${source}: ${issue.path.join('.') || 'tokens'}: ${issue.message}`);
}
