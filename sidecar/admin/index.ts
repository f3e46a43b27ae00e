import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, type Registry } from 'prom-client';
import { refuseRestOfBody } from '../http/body-limit.ts';
import { requestIdOf } from '../http/request-id.ts';
import { REQUEST_ID_HEADER } from '../http/respond.ts';
import { AdminError, adminErrors } from './errors.ts';
import { sendError, sendJson, shapeOfPath } from './responses.ts';
import { matchRoute, pathOf } from './router.ts';
import { adminRoutes } from './routes.ts';
import type { AdminDeps, Route } from './types.ts';

export type { AdminDeps } from './types.ts';
export { StaticBearerAuthenticator, staticTokensSchema, type BearerAuthenticator, type StaticToken } from './bearer.ts';
export { KubernetesBearerAuthenticator } from './kube-bearer.ts';
export { parseStaticTokens } from './static-tokens.ts';

const metricName = 'gw_admin_requests_total';

function requestCounter(registry: Registry | undefined): Counter<'operation' | 'code'> | null {
  if (!registry) return null;
  const existing = registry.getSingleMetric(metricName);
  if (existing) return existing as Counter<'operation' | 'code'>;
  return new Counter({
    name: metricName,
    help: 'Admin requests by operation and outcome (ok, or the error code).',
    labelNames: ['operation', 'code'],
    registers: [registry],
  });
}

/** The refusals of a credential: what someone guessing keys makes. */
const credentialRefusals: ReadonlySet<string> = new Set([adminErrors.adminKeyInvalid.code, adminErrors.gatewayKeyInvalid.code, adminErrors.portalKeyInvalid.code, adminErrors.bearerMissing.code]);

/** At most one warn line per this long about refused credentials, with how many there were. */
const REFUSALS_LOG_MS = 60_000;

/**
 * Refused credentials logged at warn, as someone guessing the admin key shows: the first at
 * once, then one line a minute at most with the count since the last, so that a guessing client
 * cannot flood the log. Each refusal is counted in gw_admin_requests_total all the same.
 */
class CredentialRefusals {
  readonly #log: AdminDeps['logger'];
  #lastLoggedAt = -Infinity;
  #unlogged = 0;

  constructor(log: AdminDeps['logger']) {
    this.#log = log;
  }

  refused(operation: string, code: string, client: string | undefined): void {
    this.#unlogged += 1;
    const now = performance.now();
    if (now - this.#lastLoggedAt < REFUSALS_LOG_MS) return;
    this.#log.warn({ operation, code, client, refusedSinceLastLine: this.#unlogged }, 'admin credentials refused');
    this.#lastLoggedAt = now;
    this.#unlogged = 0;
  }
}

function failureOf(route: Route, error: unknown): AdminError {
  return error instanceof AdminError ? error : new AdminError(route.failure, undefined, { cause: error });
}

/**
 * The admin listener's request handler (docs/behaviour.md#admin-operations, docs/behaviour.md#authentication, docs/behaviour.md#gateway-answers): routes, authenticates,
 * validates and answers in each operation's own body shape. It never throws: store and
 * API-server faults become 5xx answers, and the error's stable code is sent as
 * `X-GW-Error-Code` and counted.
 */
export function createAdminHandler(deps: AdminDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const counter = requestCounter(deps.registry);
  const refusals = new CredentialRefusals(deps.logger);

  async function serve(req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
    const path = pathOf(req.url) ?? '/';
    const idHeader = { [REQUEST_ID_HEADER]: requestId };
    const match = matchRoute(adminRoutes, req.method ?? '', path);
    if (match.kind !== 'found') {
      const error = new AdminError(match.kind === 'none' ? adminErrors.routeNotFound : adminErrors.methodNotAllowed);
      counter?.inc({ operation: 'unknown', code: error.def.code });
      refuseRestOfBody(req, res);
      sendError(res, shapeOfPath(path), error, match.kind === 'wrong-method' ? { ...idHeader, allow: match.allow.join(', ') } : idHeader);
      return;
    }
    const { route, params } = match;
    const log = deps.logger.child({ reqId: requestId });
    try {
      const reply = await route.handle({ req, res, deps, params, path, log });
      counter?.inc({ operation: route.operation, code: 'ok' });
      // A body the operation never asked for (a GET's, say) is drained, or its connection closed.
      refuseRestOfBody(req, res);
      sendJson(res, reply.status, reply.body, idHeader);
    } catch (thrown) {
      const error = failureOf(route, thrown);
      counter?.inc({ operation: route.operation, code: error.def.code });
      if (credentialRefusals.has(error.def.code)) refusals.refused(route.operation, error.def.code, req.socket.remoteAddress);
      const report = error.def.status >= 500 ? log.error.bind(log) : log.debug.bind(log);
      report({ operation: route.operation, code: error.def.code, err: error.cause ?? error }, 'admin request failed');
      // A body left unread (too large, or never read after a refusal) is drained so the client reads this answer.
      refuseRestOfBody(req, res);
      sendError(res, route.shape, error, idHeader);
    }
  }

  return (req, res) => {
    const requestId = requestIdOf(req);
    serve(req, res, requestId).catch((error: unknown) => {
      deps.logger.error({ err: error, reqId: requestId }, 'admin response could not be sent');
      if (!res.headersSent) res.destroy();
    });
  };
}
