import type {
  CompiledKeyLimit,
  CompiledPolicy,
  CompiledRate,
  CompiledSmoothing,
  ResourceRef,
} from '../../crds/compiled.ts';
import { policyCoversApi } from '../../crds/policy-coverage.ts';
import { appliedPolicyIds, type Session } from '../../crds/session.ts';
import { compileEndpoints, type EndpointMatcher } from './endpoint-match.ts';
import type { LimitScope, LimitSource, SmoothingPlan, ThrottlePlan } from './plan-types.ts';

/**
 * The key-level limits a session has on one API once its policies are applied
 * (docs/behaviour.md#several-policies-on-one-key, docs/behaviour.md#limits-and-their-scopes; docs/architecture.md#the-flow-of-a-resource: policies apply at request time, so a policy edit reaches
 * every key without rewriting sessions).
 */

export interface KeyRateLimit {
  rate: CompiledRate;
  /**
   * Counter scope below the identity: the policy id (its global allowance, shared by
   * every API it grants), `<policy>#<api>` (per-API), `<policy>#<api>#<METHOD path>`
   * (per-endpoint), or `session` / `session#<api>` for a key's own limits (under its own
   * pattern, `<namespace>/session…@<rate>/<per>`: docs/behaviour.md#custom-rate-limit-keys).
   */
  scopeId: string;
  coverApis: readonly string[];
  smoothing: SmoothingPlan | null;
  /** The throttle of the Policy (or key) whose limit this is (docs/behaviour.md#throttling). */
  throttle: ThrottlePlan | null;
  scope: Extract<LimitScope, `key_${string}`>;
  source: LimitSource;
}

/** The scope id of the key's own limits and quota (its session's), beside each policy's. */
const OWN_SCOPE = 'session';

export interface KeyQuota {
  max: number;
  renewalSeconds: number;
  scopeId: string;
  /** The key's own quota, which its session's quota_remaining and quota_renews seed. */
  own: boolean;
  source: ResourceRef;
}

/** A policy's (or the key's own) per-API or global rate, one of those the highest effective rate is chosen from. */
export interface RateCandidate {
  rate: CompiledRate;
  scope: 'key_per_api' | 'key_global';
  source: LimitSource;
  /** The one that became `rate`. */
  chosen: boolean;
}

export interface EffectiveLimits {
  /** Key-level per-endpoint limits, one list per policy, each in evaluation order. */
  endpointGroups: EndpointMatcher<KeyRateLimit>[][];
  /** The key-level per-API or global limit; null when none is configured. */
  rate: KeyRateLimit | null;
  /** Every per-API or global rate `rate` was chosen from, in `apply_policies` order (for explanations). */
  rateCandidates: RateCandidate[];
  /** The global rates a per-API limit replaced on this API, its Policy's or the key's own (for explanations). */
  replacedGlobals: Omit<RateCandidate, 'chosen'>[];
  /** null: unlimited. */
  quota: KeyQuota | null;
  /** `rate_limit_pattern` of the first policy carrying one, else of the session's metadata. */
  pattern: string | null;
  /** Smoothing of a per-API or global scope with no rate, which smooths nothing (for explanations). */
  smoothingWithoutRate: SmoothingWithoutRate[];
}

export interface SmoothingWithoutRate {
  scope: LimitScope;
  source: LimitSource;
  smoothing: CompiledSmoothing;
}

interface Candidate {
  limit: CompiledKeyLimit;
  /** The quota's scope id; the rate limit's too, unless `rateScopeId` names it apart. */
  scopeId: string;
  rateScopeId?: string;
  own: boolean;
  scope: 'key_per_api' | 'key_global';
  coverApis: readonly string[];
  source: ResourceRef;
  /** The global rate of the same Policy (or key) that this per-API limit replaces on the API. */
  replacesGlobal?: CompiledRate | null;
}

const perSecond = (rate: CompiledRate): number => rate.rate / rate.per;

const globalApis = new WeakMap<CompiledPolicy, readonly string[]>();

/**
 * The APIs a Policy's global allowance is spent on, of those it grants: the ones without a
 * per-API limit, which replaces it there. The DRL splits it among the gateways serving them
 * (docs/behaviour.md#algorithms). Once per policy object, so the heartbeat's count of their
 * gateways is cached by it too.
 */
export function policyGlobalApis(policy: CompiledPolicy): readonly string[] {
  let apis = globalApis.get(policy);
  if (apis === undefined) {
    apis = Object.keys(policy.access_rights).filter((api) => !policy.access_rights[api]!.limit);
    globalApis.set(policy, apis);
  }
  return apis;
}

/**
 * `callable`: the APIs the key may call, which a Policy without `access_rights` covers
 * (docs/behaviour.md#several-policies-on-one-key).
 */
function policyCandidate(policy: CompiledPolicy, apiId: string, callable: () => readonly string[]): Candidate {
  const right = policy.access_rights[apiId];
  if (right?.limit) {
    return { limit: right.limit, scopeId: `${policy.id}#${apiId}`, own: false, scope: 'key_per_api', coverApis: [apiId], source: policy.source, replacesGlobal: policy.rate };
  }
  const covered = right ? policyGlobalApis(policy) : callable();
  return { limit: policy, scopeId: policy.id, own: false, scope: 'key_global', coverApis: covered, source: policy.source };
}

/** The APIs a key may call: those its own `access_rights` or one of its Policies grant. */
function callableApis(session: Session, applied: readonly CompiledPolicy[], apiId: string): readonly string[] {
  const callable = new Set([apiId, ...Object.keys(session.access_rights)]);
  for (const policy of applied) for (const api of Object.keys(policy.access_rights)) callable.add(api);
  return [...callable];
}

/** A session's `key_id` is its Key resource's name (a public id, never the credential). */
function sessionSource(session: Session): ResourceRef {
  return { kind: 'Key', namespace: session.namespace, name: session.key_id || session.alias, ...(session.key_uid ? { uid: session.key_uid } : {}) };
}

/**
 * The key's own limits. Under the key's own rate_limit_pattern the counters are shared by
 * other keys, so they are named by the key's namespace (the tenant boundary) and the rate
 * limit by its own rate and per too: keys share a rate counter only when they share its
 * limit, which every algorithm can then hold exactly (docs/behaviour.md#custom-rate-limit-keys).
 */
function sessionCandidate(session: Session, apiId: string, applied: readonly CompiledPolicy[], underOwnPattern: boolean): Candidate {
  const source = sessionSource(session);
  const own = session.access_rights[apiId]?.limit;
  const allowance = session.rate > 0 ? session.rate : session.allowance;
  const globalRate = allowance > 0 && session.per > 0 ? { rate: allowance, per: session.per } : null;
  const rate = own ? (own.rate > 0 && own.per > 0 ? { rate: own.rate, per: own.per } : null) : globalRate;
  const scopeId = `${underOwnPattern ? `${session.namespace}/` : ''}${own ? `${OWN_SCOPE}#${apiId}` : OWN_SCOPE}`;
  const shared = underOwnPattern && rate ? { rateScopeId: `${scopeId}@${rate.rate}/${rate.per}` } : {};
  if (own) {
    return { limit: { ...own, rate }, scopeId, ...shared, own: true, scope: 'key_per_api', coverApis: [apiId], source, replacesGlobal: globalRate };
  }
  // Spent on this API and the others of its own grant that no Policy covers and no per-API limit of its own replaces it on.
  const elsewhere = Object.keys(session.access_rights).filter(
    (api) => api !== apiId && !session.access_rights[api]!.limit && !applied.some((policy) => policyCoversApi(policy.access_rights, api)),
  );
  return {
    limit: {
      rate,
      quota_max: session.quota_max,
      quota_renewal_rate: session.quota_renewal_rate,
      throttle_interval: session.throttle_interval,
      throttle_retry_limit: session.throttle_retry_limit,
      smoothing: session.smoothing,
    },
    scopeId,
    ...shared,
    own: true,
    scope: 'key_global',
    coverApis: [apiId, ...elsewhere],
    source,
  };
}

/** docs/behaviour.md#several-policies-on-one-key: the highest rate/per wins, with both its rate and its per; ties keep the first. */
function bestRate(candidates: readonly Candidate[]): Candidate | null {
  let best: Candidate | null = null;
  for (const candidate of candidates) {
    const rate = candidate.limit.rate;
    if (rate && (!best?.limit.rate || perSecond(rate) > perSecond(best.limit.rate))) best = candidate;
  }
  return best;
}

/** The highest quota wins; an unlimited one (≤ 0) is the highest of all. */
function bestQuota(candidates: readonly Candidate[]): KeyQuota | null {
  let best: Candidate | null = null;
  for (const candidate of candidates) {
    if (candidate.limit.quota_max <= 0) return null;
    if (!best || candidate.limit.quota_max > best.limit.quota_max) best = candidate;
  }
  return best
    ? { max: best.limit.quota_max, renewalSeconds: best.limit.quota_renewal_rate, scopeId: best.scopeId, own: best.own, source: best.source }
    : null;
}

function smoothingOf(candidate: Candidate): SmoothingPlan | null {
  const settings = candidate.limit.smoothing;
  return settings?.enabled ? { settings, source: candidate.source } : null;
}

function throttleOf(candidate: Candidate): ThrottlePlan | null {
  if (candidate.limit.throttle_interval <= 0 || candidate.limit.throttle_retry_limit <= 0) return null;
  return { intervalMs: candidate.limit.throttle_interval * 1000, retries: candidate.limit.throttle_retry_limit };
}

/**
 * Compiled per policy object and API: sessions are re-read every few hundred ms, but a
 * policy object lives until the next config load, so its regexes are built once.
 */
const compiledGroups = new WeakMap<CompiledPolicy, Map<string, EndpointMatcher<KeyRateLimit>[]>>();

function endpointGroup(policy: CompiledPolicy, apiId: string): EndpointMatcher<KeyRateLimit>[] {
  let perApi = compiledGroups.get(policy);
  if (perApi === undefined) {
    perApi = new Map();
    compiledGroups.set(policy, perApi);
  }
  let group = perApi.get(apiId);
  if (group === undefined) {
    group = compileEndpointGroup(policy, apiId);
    perApi.set(apiId, group);
  }
  return group;
}

function compileEndpointGroup(policy: CompiledPolicy, apiId: string): EndpointMatcher<KeyRateLimit>[] {
  const endpoints = policy.access_rights[apiId]?.endpoints ?? [];
  // The Policy's throttle on this API: its per-API limit's where it has one, which replaces the Policy's fields there.
  const throttle = throttleOf(policyCandidate(policy, apiId, () => [apiId]));
  return compileEndpoints(endpoints).map((matcher) => ({
    method: matcher.method,
    regex: matcher.regex,
    value: {
      rate: { rate: matcher.value.rate, per: matcher.value.per },
      scopeId: `${policy.id}#${apiId}#${matcher.method} ${matcher.value.path}`,
      coverApis: [apiId],
      smoothing: null,
      throttle,
      scope: 'key_endpoint' as const,
      source: { resource: policy.source, rule: `${matcher.method} ${matcher.value.path}` },
    },
  }));
}

function sessionPattern(session: Session): string | null {
  const pattern = session.meta_data.rate_limit_pattern;
  return typeof pattern === 'string' && pattern !== '' ? pattern : null;
}

export function effectiveLimits(
  session: Session,
  apiId: string,
  policies: Readonly<Record<string, CompiledPolicy>>,
): EffectiveLimits {
  const applied = appliedPolicyIds(session)
    .map((id) => policies[id])
    .filter((policy): policy is CompiledPolicy => policy !== undefined);
  const granting = applied.filter((policy) => policyCoversApi(policy.access_rights, apiId));
  // Where no applied Policy grants the API, the key may call it by its own access_rights alone
  // (sidecar/auth/authenticator.ts), and its own limits and quota apply there, as on a key
  // without policies: the grant that lets a request in is the one that limits it.
  const byOwnGrant = granting.length === 0;
  const policyPattern = byOwnGrant ? undefined : applied.find((policy) => policy.rate_limit_pattern)?.rate_limit_pattern;
  const pattern = policyPattern ?? sessionPattern(session);
  let callable: readonly string[] | undefined;
  const everyCallable = (): readonly string[] => (callable ??= callableApis(session, applied, apiId));
  const candidates = byOwnGrant ? [sessionCandidate(session, apiId, applied, pattern !== null)] : granting.map((p) => policyCandidate(p, apiId, everyCallable));
  const winner = bestRate(candidates);
  return {
    endpointGroups: granting.map((policy) => endpointGroup(policy, apiId)).filter((group) => group.length > 0),
    rate: winner?.limit.rate
      ? {
          rate: winner.limit.rate,
          scopeId: winner.rateScopeId ?? winner.scopeId,
          coverApis: winner.coverApis,
          smoothing: smoothingOf(winner),
          throttle: throttleOf(winner),
          scope: winner.scope,
          source: { resource: winner.source, rule: null },
        }
      : null,
    rateCandidates: candidates.flatMap((candidate) => {
      const { limit, scope, source } = candidate;
      return limit.rate ? [{ rate: limit.rate, scope, source: { resource: source, rule: null }, chosen: candidate === winner }] : [];
    }),
    replacedGlobals: candidates.flatMap(({ replacesGlobal, source }) =>
      replacesGlobal ? [{ rate: replacesGlobal, scope: 'key_global' as const, source: { resource: source, rule: null } }] : [],
    ),
    quota: bestQuota(candidates),
    pattern,
    smoothingWithoutRate: candidates.flatMap(({ limit, scope, source }) =>
      !limit.rate && limit.smoothing?.enabled ? [{ scope, source: { resource: source, rule: null }, smoothing: limit.smoothing }] : [],
    ),
  };
}
