import { METHODS } from 'node:http';
import type { CompiledApi, ResourceRef } from '../../crds/compiled.ts';
import type { KeyLimitsAnswer, LimitReadingAnswer } from '../../crds/admin-answers.ts';
import type { Session } from '../../crds/session.ts';
import { accessRefusal, type AccessRefusal } from '../auth/authenticator.ts';
import { isIgnored } from '../gateway/routes.ts';
import { gatewayErrors, type GatewayError } from '../http/errors.ts';
import type { Alternative } from '../limits/plan.ts';
import type { LimitSource } from '../limits/plan-types.ts';
import type { LimitExplanation, LimitReading } from '../limits/types.ts';
import { requireSecret } from './auth.ts';
import { AdminError, adminErrors } from './errors.ts';
import type { HandlerContext, Reply } from './types.ts';

const KEY_HASH = /^[0-9a-f]{64}$/;
/** The methods the proxy takes at all: Node's HTTP parser answers any other 400 before the gateway sees it. */
const PROXIED_METHODS = new Set(METHODS);
const MAX_PATH = 2048;

type Outcome = LimitExplanation['outcome'] | 'api_inactive' | 'access_denied';

/** Who asks about what, and whether the key may call the API at all. */
type AnswerHead = Pick<KeyLimitsAnswer, 'key_hash' | 'key_id' | 'api_id' | 'method' | 'path' | 'authentication' | 'access'>;

const answers: Record<Outcome, GatewayError | null> = {
  allowed: null,
  api_inactive: gatewayErrors.apiInactive,
  api_rate_limited: gatewayErrors.apiRateLimited,
  key_rate_limited: gatewayErrors.keyRateLimited,
  quota_exceeded: gatewayErrors.quotaExceeded,
  access_denied: gatewayErrors.accessDenied,
};

const unixSeconds = (ms: number): number => Math.ceil(ms / 1000);

const NO_RATE = 'no rate at this scope (rate 0: no limit), so nothing to smooth';

/** A resource as the answer names it: without its uid. */
const resourceOf = ({ kind, namespace, name }: ResourceRef): ResourceRef => ({ kind, namespace, name });

const sourceOf = ({ resource, rule }: LimitSource): { source: ResourceRef; rule: string | null } => ({ source: resourceOf(resource), rule });

const alternativeOf = ({ scope, source, rate, per }: Alternative): KeyLimitsAnswer['passed_over'][number] => ({ level: scope, ...sourceOf(source), rate, per });

/** One level, with reset as a Unix time in seconds: the X-RateLimit-Reset of the same moment. */
const levelOf = (reading: LimitReading): LimitReadingAnswer => ({
  level: reading.scope,
  ...sourceOf(reading.source),
  rate: reading.rate,
  per: reading.per,
  algorithm: reading.algorithm,
  drl: reading.drl,
  smoothing: reading.smoothing,
  unused_smoothing: reading.unusedSmoothing,
  count: reading.held?.count ?? null,
  limit: reading.held?.limit ?? null,
  remaining: reading.held?.remaining ?? null,
  reset: reading.held ? unixSeconds(reading.held.resetMs) : null,
});

/** The query of a limits read: one value per name. */
function queryOf(url: string | undefined): URLSearchParams {
  const query = new URLSearchParams(url?.split('?', 2)[1] ?? '');
  for (const name of new Set(query.keys())) {
    if (query.getAll(name).length > 1) throw new AdminError(adminErrors.queryInvalid, `${name} given more than once`);
  }
  return query;
}

interface Target {
  api: CompiledApi;
  method: string;
  /** As a client sends it, listen path included. */
  path: string;
}

function targetOf(ctx: HandlerContext): Target {
  const query = queryOf(ctx.req.url);
  const apiId = query.get('api_id');
  if (!apiId) throw new AdminError(adminErrors.queryInvalid, 'api_id is required');
  const api = ctx.deps.limits.apis().find((loaded) => loaded.api_id === apiId);
  if (!api) throw new AdminError(adminErrors.apiNotFound, `no API ${apiId} is loaded on this gateway`);
  const method = (query.get('method') ?? 'GET').toUpperCase();
  if (!PROXIED_METHODS.has(method)) throw new AdminError(adminErrors.queryInvalid, 'method must be an HTTP method the gateway serves, such as GET');
  const path = query.get('path') ?? api.listen_path;
  if (!path.startsWith('/') || path.length > MAX_PATH) throw new AdminError(adminErrors.queryInvalid, `path must start with / and be at most ${MAX_PATH} characters`);
  return { api, method, path };
}

async function sessionOf(ctx: HandlerContext, keyHash: string): Promise<Session> {
  let session: Session | null;
  try {
    session = await ctx.deps.sessions.get(keyHash);
  } catch (error) {
    throw new AdminError(adminErrors.limitsUnavailable, undefined, { cause: error });
  }
  if (!session) throw new AdminError(adminErrors.keyNotFound);
  return session;
}

/**
 * GET /gw/keys/{keyHash}/limits?api_id=&path=&method= (docs/behaviour.md#why-was-a-request-limited): the
 * limits a request of this key would meet now, in evaluation order, each with its source
 * and what its limiter holds, read through the gateway's own routes, authentication and
 * limit engine. Nothing is counted. The key is named by its hash: a raw key never travels
 * in a URL, and nothing here answers with one.
 */
export async function keyLimits(ctx: HandlerContext): Promise<Reply> {
  const { req, deps } = ctx;
  requireSecret(req, 'x-gw-authorization', deps.auth.adminSecret, adminErrors.gatewayKeyInvalid);
  const keyHash = ctx.params.keyHash!;
  if (!KEY_HASH.test(keyHash)) throw new AdminError(adminErrors.paramInvalid, "keyHash must be the key's hash: 64 lower-case hex characters");
  const { api, method, path } = targetOf(ctx);
  const state = deps.limits.state();
  const match = state.routes.match(path);
  if (match?.route.api.api_id !== api.api_id) throw new AdminError(adminErrors.queryInvalid, `path ${path} is not served by API ${api.api_id} (listen path ${api.listen_path})`);
  const { route, relativePath } = match;
  const keyed = !api.keyless && !isIgnored(route, method, relativePath);
  const session = await sessionOf(ctx, keyHash);
  const refusal: AccessRefusal | null = keyed ? accessRefusal(session, api.api_id, state.policies, Date.now() / 1000) : null;
  const head: AnswerHead = { key_hash: keyHash, key_id: session.key_id, api_id: api.api_id, method, path, authentication: api.keyless ? 'keyless' : keyed ? 'key' : 'ignored', access: refusal ?? 'granted' };
  // The gateway's own order (sidecar/gateway/gateway.ts): an inactive API refuses before any key check or limit.
  const refused = !api.active ? 'api_inactive' : refusal ? 'access_denied' : null;
  if (refused) return answer({ ...head, ...verdict(refused, null), limits: [], quota: null, throttle: null, passed_over: [], chosen_over: [], unused_smoothing: [] });

  let explained: LimitExplanation;
  try {
    explained = await deps.limits.engine.explain({ api: route.api, method, path: relativePath, session: keyed ? session : null, keyHash: keyed ? keyHash : null });
  } catch (error) {
    throw new AdminError(adminErrors.limitsUnavailable, undefined, { cause: error });
  }
  return answer({ ...head, ...explanationBody(explained) });
}

const answer = (body: KeyLimitsAnswer): Reply => ({ status: 200, body });

function explanationBody({ outcome, refusedBy, limits, quota, throttle, passedOver, outranked, smoothingWithoutRate }: LimitExplanation): Omit<KeyLimitsAnswer, keyof AnswerHead> {
  return {
    ...verdict(outcome, refusedBy),
    limits: limits.map(levelOf),
    quota: quota && {
      source: resourceOf(quota.source),
      max: quota.max,
      renewal: quota.renewal,
      used: quota.used,
      remaining: quota.remaining,
      reset: quota.resetMs === 0 ? 0 : unixSeconds(quota.resetMs),
    },
    throttle: throttle && { interval: throttle.intervalMs / 1000, retries: throttle.retries, max_wait: throttle.maxWaitMs / 1000 },
    passed_over: passedOver.map(alternativeOf),
    chosen_over: outranked.map(alternativeOf),
    unused_smoothing: smoothingWithoutRate.map(({ scope, source, smoothing }) => ({ level: scope, ...sourceOf(source), smoothing, reason: NO_RATE })),
  };
}

/** What a request now would get: the outcome, the level that decides it, and the gateway's answer when it refuses. */
function verdict(outcome: Outcome, refusedBy: LimitExplanation['refusedBy']): Pick<KeyLimitsAnswer, 'outcome' | 'refused_by' | 'answer'> {
  const answer = answers[outcome];
  return { outcome, refused_by: refusedBy, answer: answer && { status: answer.status, code: answer.code } };
}
