import type { IncomingMessage, ServerResponse } from 'node:http';
import type { MetricsSource } from './metrics-text.ts';

export interface Readiness {
  ready: boolean;
  /** Why not, for the /readyz body. */
  reasons: string[];
  /**
   * What the config source could not take as written (refused configs, files that do not
   * parse, Keys it cannot serve). They do not make the gateway unready: it serves the last
   * good versions, and everything else.
   */
  problems: { subject: string; reason: string }[];
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...headers });
  res.end(payload);
}

/** The listener's own refusals carry their code, as every gw listener's do (docs/behaviour.md#gateway-answers). */
const refuse = (res: ServerResponse, status: number, code: string, error: string, headers: Record<string, string> = {}): void =>
  json(res, status, { error }, { 'x-gw-error-code': code, ...headers });

export interface HealthChecks {
  /** The process's loops run; false makes /healthz answer 503 (default: always live). */
  live?: () => boolean;
  readiness: () => Readiness | Promise<Readiness>;
}

/**
 * The health listener of both binaries: liveness, readiness with its reasons (the sidecar:
 * config loaded, Redis connected when used; the operator: caches synced, webhook serving) and
 * Prometheus metrics.
 */
export function createHealthHandler(metrics: MetricsSource, checks: HealthChecks): (req: IncomingMessage, res: ServerResponse) => void {
  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      refuse(res, 405, 'method_not_allowed', 'Method not allowed', { allow: 'GET, HEAD' });
      return;
    }
    if (path === '/healthz') {
      const live = checks.live?.() ?? true;
      json(res, live ? 200 : 503, { status: live ? 'ok' : 'not live' });
    } else if (path === '/readyz') {
      const state = await checks.readiness();
      json(res, state.ready ? 200 : 503, { status: state.ready ? 'ready' : 'not ready', reasons: state.reasons, problems: state.problems });
    } else if (path === '/metrics') {
      const body = await metrics.text();
      res.writeHead(200, { 'content-type': metrics.contentType });
      res.end(body);
    } else {
      refuse(res, 404, 'not_found', 'Not found');
    }
  };
  return (req, res) => {
    serve(req, res).catch(() => refuse(res, 500, 'internal_error', 'metrics unavailable'));
  };
}
