import type { CompiledAccessRight, CompiledMatcher, CompiledPolicy, ResourceRef } from '../compiled.ts';
import type { PolicySpec } from '../schemas/policy.ts';
import { keyEndpointLimits, keyLimitOf } from './limits.ts';
import { methodsOverlap, pathsOverlap } from './paths.ts';
import type { CompileProblem } from './problems.ts';
import { patternMistake } from '../rate-limit-pattern.ts';

/** What a policy needs to know about the API an access right grants. */
export interface GrantedApi {
  name: string;
  ref: ResourceRef;
  /** Ignored (no-auth) endpoints; empty when the API itself failed to compile. */
  ignored: readonly CompiledMatcher[];
}

export type ApiLookup = (apiId: string) => GrantedApi | undefined;

/**
 * docs/behaviour.md#authentication: an ignored (no-auth) endpoint never sees a key, so a key-level limit on it
 * could never apply. Such limits are reported, naming both sides, and left out.
 */
function withoutIgnored(right: CompiledAccessRight, api: GrantedApi, ref: ResourceRef, field: string) {
  const problems: CompileProblem[] = [];
  const endpoints = right.endpoints.filter((limit) => {
    const hit = api.ignored.find((m) => methodsOverlap(m.method, limit.method) && pathsOverlap(m, limit));
    if (!hit) return true;
    problems.push({
      ref,
      field,
      reason: 'IgnoredEndpointWithKeyLimit',
      message:
        `key-level limit on ${limit.method} ${limit.path} meets the ignored (no-auth) endpoint ${hit.method} ${hit.path} ` +
        `of ApiDefinition ${api.ref.namespace}/${api.ref.name} (api_id ${right.api_id}); the limit is left out`,
    });
    return false;
  });
  return { right: { ...right, endpoints }, problems };
}

function compileAccessRight(
  apiId: string,
  right: PolicySpec['access_rights'][string],
  api: GrantedApi,
  ref: ResourceRef,
): { right: CompiledAccessRight; problems: CompileProblem[] } {
  const field = `spec.access_rights["${apiId}"].endpoints`;
  const endpoints = keyEndpointLimits(right.endpoints, ref, field);
  const checked = withoutIgnored(
    {
      api_id: apiId,
      api_name: right.api_name ?? api.name,
      limit: right.limit ? keyLimitOf(right.limit) : null,
      endpoints: endpoints.limits,
    },
    api,
    ref,
    field,
  );
  return { right: checked.right, problems: [...endpoints.problems, ...checked.problems] };
}

/** Policy → compiled policy; grants of missing APIs are reported and left out, the rest stays. */
export function compilePolicy(ref: ResourceRef, spec: PolicySpec, lookup: ApiLookup): { policy: CompiledPolicy; problems: CompileProblem[] } {
  const problems: CompileProblem[] = [];
  const accessRights: Record<string, CompiledAccessRight> = {};
  for (const apiId of Object.keys(spec.access_rights).sort()) {
    const api = lookup(apiId);
    if (!api) {
      problems.push({ ref, field: `spec.access_rights["${apiId}"]`, reason: 'MissingApi', message: `no ApiDefinition has api_id "${apiId}"` });
      continue;
    }
    const compiled = compileAccessRight(apiId, spec.access_rights[apiId]!, api, ref);
    accessRights[apiId] = compiled.right;
    problems.push(...compiled.problems);
  }
  const metaData = spec.meta_data ?? {};
  const pattern = metaData.rate_limit_pattern;
  // Reported, and in force as written: leaving it out would give each key the allowance meant for many.
  const mistake = patternMistake(pattern);
  if (mistake !== null) problems.push({ ref, field: 'spec.meta_data.rate_limit_pattern', reason: 'InvalidRateLimitPattern', message: mistake });
  return {
    policy: {
      ...keyLimitOf(spec),
      id: `${ref.namespace}/${ref.name}`,
      source: ref,
      meta_data: metaData,
      rate_limit_pattern: pattern ? pattern : null,
      tags: spec.tags ?? [],
      access_rights: accessRights,
    },
    problems,
  };
}
