import type { CompiledApi, ResourceRef } from '../compiled.ts';
import type { CompileProblem, ProblemReason } from './problems.ts';

/** What both API flavours share: identity, source, categories, and how to report a problem. */
export interface ApiBase {
  ref: ResourceRef;
  fields: Pick<CompiledApi, 'api_id' | 'name' | 'source' | 'categories'>;
  problem(field: string, reason: ProblemReason, message: string): CompileProblem;
}

export function apiBase(ref: ResourceRef, apiId: string, name: string, categories: readonly string[] | undefined): ApiBase {
  return {
    ref,
    fields: { api_id: apiId, name, source: ref, categories: [...new Set(categories ?? [])] },
    problem: (field, reason, message) => ({ ref, field, reason, message }),
  };
}
