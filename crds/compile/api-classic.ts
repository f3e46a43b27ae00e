import type { CompiledApi, CompiledEndpointLimit, CompiledMatcher, CompiledStreamLimit } from '../compiled.ts';
import { durationMs } from '../duration.ts';
import type { ApiDefinitionSpec } from '../schemas/api-definition.ts';
import { rateOf, smoothingOf } from './limits.ts';
import { regexPathPattern } from './paths.ts';
import { canonicalPath } from './request-path.ts';
import type { CompileProblem } from './problems.ts';
import type { ApiBase } from './api-base.ts';

type Proxy = NonNullable<ApiDefinitionSpec['proxy']>;

/** Classic definition (docs/behaviour.md#limits-and-their-scopes) → compiled API; any problem leaves the API out. */
export function compileClassicApi(spec: ApiDefinitionSpec, proxy: Proxy, base: ApiBase): { api: CompiledApi | null; problems: CompileProblem[] } {
  const problems: CompileProblem[] = [];
  const extended = spec.use_extended_paths !== false ? spec.extended_paths : undefined;
  const endpointLimits = compileRateLimits(extended?.rate_limit ?? [], base, problems);
  const ignored = compileIgnored(extended?.ignored ?? [], base, problems);
  const streamLimit = compileStreamLimit(spec, proxy.rate_limit, base, problems);
  const global = spec.global_rate_limit;
  // The API-level limiter is both API-side levels (docs/behaviour.md#evaluation-order): its
  // endpoint rules are still checked above, so a bad one is reported either way.
  const disabled = spec.disable_rate_limit === true;
  const apiLimit = disabled ? null : rateOf(global?.rate, global?.per);
  if (problems.length > 0) return { api: null, problems };
  return {
    api: {
      ...base.fields,
      ...classicDefaults(spec),
      listen_path: canonicalPath(proxy.listen_path),
      target_url: proxy.target_url,
      strip_listen_path: proxy.strip_listen_path,
      api_limit: apiLimit,
      endpoint_limits: disabled ? [] : endpointLimits,
      ignored,
      stream_limit: streamLimit,
      smoothing: smoothingOf(global?.smoothing, apiLimit),
    },
    problems,
  };
}

/** Defaults of classic fields left out: active, auth token in `Authorization`. */
function classicDefaults(spec: ApiDefinitionSpec): Pick<CompiledApi, 'active' | 'keyless' | 'auth_header_name'> {
  return {
    active: spec.state?.active ?? true,
    keyless: spec.use_keyless ?? false,
    auth_header_name: spec.auth?.auth_header_name ?? 'Authorization',
  };
}

type RateLimitRule = NonNullable<NonNullable<ApiDefinitionSpec['extended_paths']>['rate_limit']>[number];
type IgnoredRule = NonNullable<NonNullable<ApiDefinitionSpec['extended_paths']>['ignored']>[number];

function compileRateLimits(rules: RateLimitRule[], base: ApiBase, problems: CompileProblem[]): CompiledEndpointLimit[] {
  const out: CompiledEndpointLimit[] = [];
  rules.forEach((rule, i) => {
    const compiled = regexPathPattern(rule.path);
    if (!compiled.ok) {
      problems.push(base.problem(`spec.extended_paths.rate_limit[${i}].path`, 'InvalidRegex', compiled.message));
      return;
    }
    const rate = rateOf(rule.rate, rule.per);
    if (rule.enabled && rate) out.push({ path: rule.path, pattern: compiled.pattern, method: rule.method, ...rate });
  });
  return out;
}

function compileIgnored(rules: IgnoredRule[], base: ApiBase, problems: CompileProblem[]): CompiledMatcher[] {
  const out: CompiledMatcher[] = [];
  rules.forEach((rule, i) => {
    const compiled = regexPathPattern(rule.path);
    if (!compiled.ok) {
      problems.push(base.problem(`spec.extended_paths.ignored[${i}].path`, 'InvalidRegex', compiled.message));
      return;
    }
    out.push({ path: rule.path, pattern: compiled.pattern, method: rule.method });
  });
  return out;
}

function compileStreamLimit(spec: ApiDefinitionSpec, label: string | undefined, base: ApiBase, problems: CompileProblem[]): CompiledStreamLimit | null {
  if (label === undefined) return null;
  const index = (spec.rate_limit_resources ?? []).findIndex((r) => r.label === label);
  const resource = spec.rate_limit_resources?.[index];
  if (!resource) {
    problems.push(base.problem('spec.proxy.rate_limit', 'UnknownRateLimitResource', `no rate_limit_resources entry has the label "${label}"`));
    return null;
  }
  // The schema holds the interval to a duration from 1ms to the longest window (api-definition.ts).
  return { label, count: resource.local.count, interval_ms: Math.round(durationMs(resource.local.interval)) };
}
