import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../common/logger.ts';
import { andThen, type MaybePromise } from '../../common/maybe-promise.ts';
import type { CompiledPolicy, CompiledStreamLimit } from '../../crds/compiled.ts';
import type { Session } from '../../crds/session.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import { authenticate, type AuthResult } from '../auth/authenticator.ts';
import type { SessionCache } from '../auth/session-cache.ts';
import { StreamRateLimitWaitError } from '../limits/errors.ts';
import { streamMaxWaitMs, type StreamSlot, type StreamSlots } from '../limits/stream-limiter.ts';
import type { DecisionOutcome, LimitDecision, LimitEngine } from '../limits/types.ts';
import { statusClass, type SidecarMetrics } from '../metrics.ts';
import { clientGone, type Forwarder, type ForwardResult, type UpgradeForwarder } from '../proxy/forwarder.ts';
import { CLIENT_CLOSED_REQUEST, gatewayErrors, type GatewayError } from '../http/errors.ts';
import { rateHeadersFor } from './rate-headers.ts';
import { requestIdOf } from '../http/request-id.ts';
import { REQUEST_ID_HEADER, sendError, sendErrorOnSocket } from '../http/respond.ts';
import { isIgnored, type RouteMatch, type RouteTable } from './routes.ts';
import { Sampler, TIMING_SAMPLE_EVERY } from '../../common/sampler.ts';

/** What the request path reads, swapped whole on every config change. */
export interface GatewayState {
  /**
   * False until the first config is applied: the listeners bind before it loads, so that
   * health answers meanwhile, and an empty route table would answer 404 for APIs about to be served.
   */
  loaded: boolean;
  routes: RouteTable;
  settings: GatewaySettings;
  policies: Readonly<Record<string, CompiledPolicy>>;
}

export interface GatewayDeps {
  state: () => GatewayState;
  engine: LimitEngine;
  sessions: SessionCache;
  forwarders: Record<GatewaySettings['forwarder'], Forwarder>;
  upgrades: UpgradeForwarder;
  streams: StreamSlots;
  metrics: SidecarMetrics;
  logger: Logger;
}

/** An admission: the refusal to answer (null to forward), the rate headers either way, and the state and route it was decided on. */
interface Admitted {
  error: GatewayError | null;
  rateHeaders: Record<string, string> | null;
  state: GatewayState;
  match: RouteMatch | null;
}

/** A routed request on its way through admission, with the state it was routed on and its attempt (see `#admitCurrent`). */
interface RoutedRequest {
  req: IncomingMessage;
  exchange: Exchange;
  state: GatewayState;
  match: RouteMatch;
  method: string;
  attempt: number;
}

/** The admission of a routed request with this refusal (or none) and these headers. */
const admitted = ({ state, match }: RoutedRequest, error: GatewayError | null, rateHeaders: Record<string, string> | null): Admitted => ({
  error,
  rateHeaders,
  state,
  match,
});

/** A request's stream slot in admission: none (no stream limit), taken, or to take once its limits admit it. */
type SlotHold = StreamSlot | { takeOnAdmission: CompiledStreamLimit } | null;

const taken = (slot: SlotHold): slot is StreamSlot => slot !== null && !('takeOnAdmission' in slot);

/** Admission attempts when the config keeps changing under it (see `#admitCurrent`). */
const maxAdmissions = 3;

const refusals: Record<DecisionOutcome, GatewayError | null> = {
  allowed: null,
  api_rate_limited: gatewayErrors.apiRateLimited,
  key_rate_limited: gatewayErrors.keyRateLimited,
  quota_exceeded: gatewayErrors.quotaExceeded,
  store_unavailable: gatewayErrors.storeUnavailable,
};

/** What admission needs of the exchange beyond the request: its id, and the signal of a client that left. */
interface Exchange {
  requestId: string;
  signal?: AbortSignal;
}

/** The answer's header that names the request. */
const idHeaders = (requestId: string): Record<string, string> => ({ [REQUEST_ID_HEADER]: requestId });

/** The proxy listener's request pipeline: route, authenticate, limit, forward (docs/behaviour.md#gateway-answers, docs/architecture.md#performance). */
export class Gateway {
  readonly #deps: GatewayDeps;
  readonly #timingSampler = new Sampler(TIMING_SAMPLE_EVERY);

  constructor(deps: GatewayDeps) {
    this.#deps = deps;
  }

  /**
   * Admission against one config: authentication and the limit engine must read the same
   * policies, and the runtime swaps the engine's config and this state in one step. A swap
   * while the session was being read therefore starts admission over on the new state (the
   * session is then cached, so the retry costs no store read); the last attempt keeps what it has.
   * A request that waits for nothing (a keyless API with no limit to count) is admitted
   * without a promise, and one that waits takes one promise per step it waits on
   * (docs/architecture.md#performance).
   */
  #admitCurrent(req: IncomingMessage, exchange: Exchange, attempt = 1): MaybePromise<Admitted> {
    const state = this.#deps.state();
    if (!state.loaded) return { error: gatewayErrors.notReady, rateHeaders: null, state, match: null };
    const match = state.routes.match(req.url ?? '/');
    if (match === null) return { error: gatewayErrors.notFound, rateHeaders: null, state, match };
    const { route, relativePath } = match;
    if (!route.api.active) return { error: gatewayErrors.apiInactive, rateHeaders: null, state, match };
    const method = req.method ?? 'GET';
    const routed: RoutedRequest = { req, exchange, state, match, method, attempt };
    if (route.api.keyless || isIgnored(route, method, relativePath)) return this.#limit(routed, null, null);
    const authenticated = (auth: AuthResult): MaybePromise<Admitted> =>
      auth.ok ? this.#limit(routed, auth.session, auth.keyHash) : admitted(routed, auth.error, null);
    return andThen(authenticate(req.headers, route.authHeader, route.api.api_id, state.policies, this.#deps.sessions), authenticated);
  }

  /**
   * The limits a routed (and, unless keyless, authenticated) request meets, and its stream slot.
   * The slot is taken first: a request it refuses is counted by no limit and no quota. A key
   * that throttles takes it once its limits admit it instead, so that no slot is held through
   * its throttle wait (docs/behaviour.md#the-stream-rate-limit-resource).
   */
  #limit(routed: RoutedRequest, session: Session | null, keyHash: string | null): MaybePromise<Admitted> {
    if (routed.attempt < maxAdmissions && this.#deps.state() !== routed.state) return this.#admitCurrent(routed.req, routed.exchange, routed.attempt + 1);
    const { api } = routed.match.route;
    if (api.stream_limit === null) return this.#decide(routed, session, keyHash, null);
    const limit = api.stream_limit;
    const request = { api, method: routed.method, path: routed.match.relativePath, session, keyHash };
    if (session !== null && this.#deps.engine.throttles(request)) return this.#decide(routed, session, keyHash, { takeOnAdmission: limit });
    return this.#takeSlot(routed, limit).then((slot) => {
      // The config may have changed while the slot was given: the request starts over on it.
      if (routed.attempt < maxAdmissions && this.#deps.state() !== routed.state) {
        slot.giveBack();
        return this.#admitCurrent(routed.req, routed.exchange, routed.attempt + 1);
      }
      return this.#decide(routed, session, keyHash, slot);
    }, (err: unknown) => this.#limitFailed(routed, err, null));
  }

  #decide(routed: RoutedRequest, session: Session | null, keyHash: string | null, slot: SlotHold): MaybePromise<Admitted> {
    // Nothing is awaited from the state check to the engine's synchronous planning, so the check holds for it.
    const { match, method, exchange } = routed;
    let decision: MaybePromise<LimitDecision>;
    try {
      decision = this.#deps.engine.decide({ api: match.route.api, method, path: match.relativePath, session, keyHash }, exchange.signal);
    } catch (err) {
      return this.#limitFailed(routed, err, slot);
    }
    // A failed decision is answered too, whether it threw above or rejects here.
    if (decision instanceof Promise) return decision.then((decided) => this.#decided(routed, decided, slot), (err: unknown) => this.#limitFailed(routed, err, slot));
    return this.#decided(routed, decision, slot);
  }

  /** The decision's refusal and headers; an admitted request on a stream-limited API waits for its slot first. */
  #decided(routed: RoutedRequest, decision: LimitDecision, slot: SlotHold): MaybePromise<Admitted> {
    try {
      const rateHeaders = rateHeadersFor(decision, routed.state.settings.rate_limit_response_headers);
      const refusal = refusals[decision.outcome];
      if (slot === null) return admitted(routed, refusal, rateHeaders);
      if (refusal !== null) {
        if (taken(slot)) slot.giveBack();
        return admitted(routed, refusal, rateHeaders);
      }
      const held = taken(slot) ? Promise.resolve(slot) : this.#takeSlot(routed, slot.takeOnAdmission);
      return held.then((admittedSlot) => admittedSlot.wait(routed.exchange.signal)).then(
        () => admitted(routed, null, rateHeaders),
        (err: unknown) => this.#limitFailed(routed, err, null),
      );
    } catch (err) {
      return this.#limitFailed(routed, err, slot);
    }
  }

  #takeSlot({ match, state }: RoutedRequest, limit: CompiledStreamLimit): Promise<StreamSlot> {
    return this.#deps.streams.take(match.route.api.api_id, limit, streamMaxWaitMs(state.settings));
  }

  /** A limit or a slot that failed; the slot taken (if any) goes back unused. */
  #limitFailed(routed: RoutedRequest, err: unknown, slot: SlotHold): Admitted {
    if (taken(slot)) slot.giveBack();
    const { match: { route }, exchange: { requestId, signal } } = routed;
    if (err instanceof StreamRateLimitWaitError) {
      // When the refused request's slot would have come: a hint for the caller's retry.
      return admitted(routed, gatewayErrors.streamRateLimitWaitExceeded, { 'retry-after': String(Math.ceil(err.waitMs / 1000)) });
    }
    // An abort means the client left while waiting (throttle, stream slot): nothing to report.
    if (!signal?.aborted) this.#log(requestId).error({ err, api: route.api.api_id }, 'limit decision failed');
    return admitted(routed, gatewayErrors.storeUnavailable, null);
  }

  /** A request's logger: made only when something is logged, so the hot path pays nothing for it. */
  #log(requestId: string): Logger {
    return this.#deps.logger.child({ reqId: requestId });
  }

  /** The proxy listener's request handler; it never rejects, so no request can crash the process. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const requestId = requestIdOf(req);
    this.#handle(req, res, requestId).catch((err: unknown) => {
      this.#log(requestId).error({ err, url: req.url }, 'request failed inside the gateway');
      sendError(res, gatewayErrors.internal, idHeaders(requestId));
      this.#deps.metrics.gatewayErrors.inc('', gatewayErrors.internal.code);
    });
  };

  /** The upgrade handler; like `handle`, it never rejects. */
  readonly upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const requestId = requestIdOf(req);
    this.#upgrade(req, socket, head, requestId).catch((err: unknown) => {
      this.#log(requestId).error({ err, url: req.url }, 'upgrade failed inside the gateway');
      sendErrorOnSocket(socket, gatewayErrors.internal, idHeaders(requestId));
      this.#deps.metrics.gatewayErrors.inc('', gatewayErrors.internal.code);
    });
  };

  async #handle(req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
    const signal = clientGone(res);
    const timed = this.#timingSampler.next();
    const started = timed ? performance.now() : 0;
    const admitting = this.#admitCurrent(req, { requestId, signal });
    const admission = admitting instanceof Promise ? await admitting : admitting;
    const { state, match } = admission;
    const api = match?.route.api.api_id ?? '';
    if (timed) this.#deps.metrics.admissionSeconds.observe((performance.now() - started) / 1000, api);
    if (signal.aborted) {
      // The client left during admission: nobody would read the upstream's answer, so it is never asked.
      req.destroy();
      this.#deps.metrics.requests.inc(api, statusClass(CLIENT_CLOSED_REQUEST));
      return;
    }
    if (admission.error !== null || match === null) {
      req.resume();
      const error = admission.error ?? gatewayErrors.notFound;
      // Why a request was refused, for whoever runs at debug level. Never the URL: a
      // client may have put its key in the query string.
      if (this.#deps.logger.isLevelEnabled('debug')) {
        this.#log(requestId).debug({ api, method: req.method, status: error.status, code: error.code }, 'request refused');
      }
      sendError(res, error, admission.rateHeaders, idHeaders(requestId));
      this.#deps.metrics.requests.inc(api, statusClass(res.statusCode));
      this.#deps.metrics.gatewayErrors.inc(api, error.code);
      return;
    }
    const forwarder = this.#deps.forwarders[state.settings.forwarder];
    const result = await forwarder.forward({
      req,
      res,
      origin: match.route.origin,
      path: match.upstreamPath,
      rateHeaders: admission.rateHeaders,
      answerHeaders: idHeaders(requestId),
      signal,
    });
    this.#answered(req, requestId, api, match.route.origin, result);
    if (timed && result.upstreamSeconds !== null) this.#deps.metrics.upstreamSeconds.observe(result.upstreamSeconds, api);
  }

  /** What a forwarded request's answer is counted and logged as. Never the URL: a client may have put its key in the query string. */
  #answered(req: IncomingMessage, requestId: string, api: string, upstream: string, result: ForwardResult): void {
    this.#deps.metrics.requests.inc(api, statusClass(result.status));
    const { error } = result;
    if (error !== null) this.#deps.metrics.gatewayErrors.inc(api, error.code);
    // The forwarder's own refusal of the client's request (413), logged as the admission's are.
    if (error !== null && result.status < 500) {
      this.#log(requestId).debug({ api, method: req.method, status: result.status, code: error.code }, 'request refused');
      return;
    }
    // One line per answered request, for whoever runs at trace level: an access log.
    if (this.#deps.logger.isLevelEnabled('trace')) this.#log(requestId).trace({ api, method: req.method, status: result.status }, 'request answered');
    // The upstream failed (502, 504): what an operator looks for first.
    if (error !== null) this.#log(requestId).warn({ api, upstream, status: result.status, code: error.code, cause: result.cause }, 'upstream failed');
  }

  /** Connection upgrades (WebSocket) pass the same route, auth and limits before http-proxy carries them. */
  async #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, requestId: string): Promise<void> {
    socket.on('error', (err) => this.#log(requestId).debug({ err }, 'upgrade socket error'));
    // Only a WebSocket offer gets here (bounded-server.ts). An opening handshake is a GET (RFC
    // 6455 §4.1); http-proxy would drop any other without a word.
    if (req.method !== 'GET') {
      sendErrorOnSocket(socket, gatewayErrors.badUpgrade, idHeaders(requestId));
      // Refused before any route, so counted under api="" as the listener's own refusals are.
      this.#deps.metrics.requests.inc('', statusClass(gatewayErrors.badUpgrade.status));
      this.#deps.metrics.gatewayErrors.inc('', gatewayErrors.badUpgrade.code);
      return;
    }
    const admission = await this.#admitCurrent(req, { requestId });
    const { match } = admission;
    const api = match?.route.api.api_id ?? '';
    if (admission.error !== null || match === null) {
      const error = admission.error ?? gatewayErrors.notFound;
      sendErrorOnSocket(socket, error, admission.rateHeaders, idHeaders(requestId));
      this.#deps.metrics.requests.inc(api, statusClass(error.status));
      this.#deps.metrics.gatewayErrors.inc(api, error.code);
      return;
    }
    // Counted once its fate is known, as a request's answer is: 101, the upstream's refusal, the
    // gateway's 502/504, or 499 for a client that left before any of them.
    const result = await this.#deps.upgrades.upgrade(req, socket, head, {
      origin: match.route.origin,
      path: match.upstreamPath,
      answerHeaders: { ...admission.rateHeaders, ...idHeaders(requestId) },
    });
    this.#answered(req, requestId, api, match.route.origin, result);
  }
}
