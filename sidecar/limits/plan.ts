import type { CompiledApi, CompiledConfig } from '../../crds/compiled.ts';
import { countedQuotaPeriod, countedQuotaRenewal } from '../../crds/quota-times.ts';
import type { Session } from '../../crds/session.ts';
import { effectiveLimits, type EffectiveLimits, type KeyQuota, type KeyRateLimit, type SmoothingWithoutRate } from './effective-session.ts';
import { compileEndpoints, firstMatch, type EndpointMatcher } from './endpoint-match.ts';
import type { LimitScope, LimitSource, PlannedLimit, QuotaPlan, RequestPlan, ThrottlePlan } from './plan-types.ts';
import { rateLimitIdentity } from './rate-limit-pattern.ts';
import type { LimitRequest } from './types.ts';

/** A configured limit the plan did not take (docs/behaviour.md#why-was-a-request-limited). */
export interface Alternative {
  scope: LimitScope;
  source: LimitSource;
  rate: number;
  /** Seconds. */
  per: number;
}

export interface PlanChoices {
  /** Configured limits a more specific one replaced for this request (docs/behaviour.md#evaluation-order). */
  passedOver: Alternative[];
  /** Other policies' limits the key's limit was chosen over by effective rate (docs/behaviour.md#several-policies-on-one-key). */
  outranked: Alternative[];
  /** Smoothing configured on a scope the request meets that has no rate (docs/behaviour.md#smoothing). */
  smoothingWithoutRate: SmoothingWithoutRate[];
}

/** A key-level limit, or one of the rates the key's limit was chosen from, as an alternative. */
const alternative = ({ scope, source, rate }: Pick<KeyRateLimit, 'scope' | 'source' | 'rate'>): Alternative => ({ scope, source, rate: rate.rate, per: rate.per });

interface SessionEntry {
  limits: EffectiveLimits;
  identity: string;
  /** The whole second the session was made (as a key's own quota_renews counts from), in ms; NaN when unknown. */
  madeMs: number;
  /** The planned key-level limit for each of the session's limits, built on first use. */
  planned: Map<KeyRateLimit, PlannedLimit>;
}

/** An API's own limits, planned once per config: per-endpoint first, else the API-wide one. */
interface ApiLimits {
  endpoints: EndpointMatcher<PlannedLimit>[];
  fallback: PlannedLimit | null;
}

const perSecond = (limit: KeyRateLimit): number => limit.rate.rate / limit.rate.per;

/** Whole milliseconds: the stores compute windows and expiries in integer ms. */
const toMs = (seconds: number): number => Math.max(1, Math.round(seconds * 1000));

/** Highest rate/per among the first match of each policy (docs/behaviour.md#several-policies-on-one-key applied per endpoint). */
/** The key-level limit a request meets: its endpoint's, else the key's per-API or global rate. */
function keyLimitMet(entry: SessionEntry, request: LimitRequest): KeyRateLimit | null {
  return keyEndpointLimit(entry.limits.endpointGroups, request.method, request.path) ?? entry.limits.rate;
}

function keyEndpointLimit(groups: EffectiveLimits['endpointGroups'], method: string, path: string): KeyRateLimit | null {
  let best: KeyRateLimit | null = null;
  for (const group of groups) {
    const match = firstMatch(group, method, path);
    if (match && (!best || perSecond(match) > perSecond(best))) best = match;
  }
  return best;
}

function apiLimits(api: CompiledApi): ApiLimits {
  const coverApis = [api.api_id];
  const endpoints = compileEndpoints(api.endpoint_limits).map(({ method, regex, value }) => ({
    method,
    regex,
    value: {
      scope: 'api_endpoint' as const,
      source: { resource: api.source, rule: `${value.method} ${value.path}` },
      rate: value.rate,
      perMs: toMs(value.per),
      limiterId: `a:${api.api_id}|${value.method} ${value.path}`,
      coverApis,
      smoothing: null,
    },
  }));
  const fallback: PlannedLimit | null = api.api_limit
    ? {
        scope: 'api',
        source: { resource: api.source, rule: null },
        rate: api.api_limit.rate,
        perMs: toMs(api.api_limit.per),
        limiterId: `a:${api.api_id}`,
        coverApis,
        smoothing: api.smoothing?.enabled ? { settings: api.smoothing, source: api.source } : null,
      }
    : null;
  return { endpoints, fallback };
}

function keyPlan(limit: KeyRateLimit, identity: string): PlannedLimit {
  return {
    scope: limit.scope,
    source: limit.source,
    rate: limit.rate.rate,
    perMs: toMs(limit.rate.per),
    limiterId: `${identity}:${limit.scopeId}`,
    coverApis: limit.coverApis,
    smoothing: limit.smoothing,
  };
}

/**
 * A quota's state for a store that holds none yet (docs/behaviour.md#evaluation-order): a new Key's first
 * period runs from its session's making. The key's own quota is seeded from the session's
 * quota_remaining and quota_renews while that period is current, 0 remaining included (a spec
 * may give a key none left); a policy's quota starts full, its first period ending a renewal
 * after the session was made, or at the first request once that time has gone by.
 */
function quotaPlan(quota: KeyQuota, entry: SessionEntry, session: Session, nowMs: number): QuotaPlan {
  const renewalMs = quota.renewalSeconds > 0 ? countedQuotaPeriod(quota.renewalSeconds) * 1000 : 0;
  const plan = { quotaId: `${entry.identity}:${quota.scopeId}`, source: quota.source, max: quota.max, renewalMs };
  if (!quota.own) {
    const firstEndsMs = renewalMs > 0 ? entry.madeMs + renewalMs : Number.NaN;
    return { ...plan, initRemaining: quota.max, initRenewsMs: firstEndsMs > nowMs ? firstEndsMs : 0 };
  }
  const renewsMs = countedQuotaRenewal(session.quota_renews) * 1000;
  // The session's quota_remaining / quota_renews seed the state only while they are current;
  // without a renewal time, a 0 is the field's default rather than a key given nothing.
  const inPeriod = renewalMs > 0 && renewsMs > nowMs;
  const current = renewalMs === 0 || inPeriod;
  const least = inPeriod ? 0 : 1;
  const seeded = current && session.quota_remaining >= least && session.quota_remaining <= quota.max;
  return { ...plan, initRemaining: seeded ? session.quota_remaining : quota.max, initRenewsMs: inPeriod ? renewsMs : 0 };
}

/**
 * Turns a request into the ordered limits it meets (docs/behaviour.md#evaluation-order, docs/behaviour.md#algorithms): the most
 * specific API-level limit, then the most specific key-level one. Regexes and effective
 * sessions are prepared once per config (and per session object), not per request.
 */
export class Planner {
  #config: CompiledConfig;
  /** By compiled API object, across configs: an API a config change left alone keeps its limits (they depend on it alone). */
  readonly #apiLimits = new WeakMap<CompiledApi, ApiLimits>();
  #sessions = new WeakMap<Session, Map<string, SessionEntry>>();

  constructor(config: CompiledConfig) {
    this.#config = config;
    this.update(config);
  }

  update(config: CompiledConfig): void {
    this.#config = config;
    this.#sessions = new WeakMap();
    for (const api of config.apis) this.#apiLimitsOf(api);
  }

  plan(request: LimitRequest, nowMs: number): RequestPlan {
    const limits: PlannedLimit[] = [];
    const apiLimit = this.#apiLevel(request);
    if (apiLimit) limits.push(apiLimit);
    if (!request.session || !request.keyHash) return { limits, quota: null, throttle: null };
    const entry = this.#sessionEntry(request.session, request.keyHash, request.api.api_id);
    const keyLimit = keyLimitMet(entry, request);
    // A request is throttled as the limit it meets says: a per-endpoint limit's Policy may throttle where another Policy's rate does not.
    if (keyLimit) {
      let planned = entry.planned.get(keyLimit);
      if (!planned) {
        planned = keyPlan(keyLimit, entry.identity);
        entry.planned.set(keyLimit, planned);
      }
      limits.push(planned);
    }
    const quota = entry.limits.quota ? quotaPlan(entry.limits.quota, entry, request.session, nowMs) : null;
    return { limits, quota, throttle: keyLimit?.throttle ?? null };
  }

  /** The throttle of the key-level limit the request meets, as `plan` gives it, without planning the rest. */
  throttle(request: LimitRequest): ThrottlePlan | null {
    if (!request.session || !request.keyHash) return null;
    return keyLimitMet(this.#sessionEntry(request.session, request.keyHash, request.api.api_id), request)?.throttle ?? null;
  }

  /** What `plan` chose among for the same request: never on the request path, only for the effective-limits read. */
  choices(request: LimitRequest): PlanChoices {
    const passedOver: Alternative[] = [];
    const outranked: Alternative[] = [];
    const api = this.#apiLimitsOf(request.api);
    if (api.fallback && firstMatch(api.endpoints, request.method, request.path)) {
      const { scope, source, rate, perMs } = api.fallback;
      passedOver.push({ scope, source, rate, per: perMs / 1000 });
    }
    const { smoothing } = request.api;
    const smoothingWithoutRate: SmoothingWithoutRate[] =
      !request.api.api_limit && smoothing?.enabled ? [{ scope: 'api', source: { resource: request.api.source, rule: null }, smoothing }] : [];
    if (!request.session || !request.keyHash) return { passedOver, outranked, smoothingWithoutRate };
    const { limits } = this.#sessionEntry(request.session, request.keyHash, request.api.api_id);
    smoothingWithoutRate.push(...limits.smoothingWithoutRate);
    const endpoint = keyEndpointLimit(limits.endpointGroups, request.method, request.path);
    if (endpoint) {
      for (const group of limits.endpointGroups) {
        const match = firstMatch(group, request.method, request.path);
        if (match && match !== endpoint) outranked.push(alternative(match));
      }
      if (limits.rate) passedOver.push(alternative(limits.rate));
    }
    // The rates the chosen one won over, whether or not an endpoint's limit then replaced it.
    for (const candidate of limits.rateCandidates) {
      if (!candidate.chosen) outranked.push(alternative(candidate));
    }
    passedOver.push(...limits.replacedGlobals.map(alternative));
    return { passedOver, outranked, smoothingWithoutRate };
  }

  #apiLimitsOf(api: CompiledApi): ApiLimits {
    let limits = this.#apiLimits.get(api);
    if (!limits) {
      limits = apiLimits(api);
      this.#apiLimits.set(api, limits);
    }
    return limits;
  }

  #apiLevel(request: LimitRequest): PlannedLimit | null {
    const limits = this.#apiLimitsOf(request.api);
    return firstMatch(limits.endpoints, request.method, request.path) ?? limits.fallback;
  }

  #sessionEntry(session: Session, keyHash: string, apiId: string): SessionEntry {
    let perApi = this.#sessions.get(session);
    if (!perApi) {
      perApi = new Map();
      this.#sessions.set(session, perApi);
    }
    let entry = perApi.get(apiId);
    if (!entry) {
      const limits = effectiveLimits(session, apiId, this.#config.policies);
      const madeMs = Math.floor(Date.parse(session.date_created) / 1000) * 1000;
      entry = { limits, identity: rateLimitIdentity(limits.pattern, session.meta_data, keyHash), madeMs, planned: new Map() };
      perApi.set(apiId, entry);
    }
    return entry;
  }
}
