import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import type { Logger } from '../../common/logger.ts';
import type { SessionStore } from '../../common/session-store.ts';
import type { CompiledApi } from '../../crds/compiled.ts';
import type { GatewayState } from '../gateway/gateway.ts';
import type { LimitEngine } from '../limits/types.ts';
import type { ResourceStore } from '../resources/types.ts';
import type { BearerAuthenticator } from './bearer.ts';
import type { ErrorDef } from './errors.ts';
import type { ErrorShape } from './responses.ts';

/** What the admin listener needs from the sidecar that mounts it (sidecar/main.ts wires it). */
export interface AdminDeps {
  /** Custom resources the operations read and write (cluster or `--config` folder). */
  resources: ResourceStore;
  /** Key sessions by key hash (Redis, or the in-memory store standalone). */
  sessions: SessionStore;
  /** The gateway's loaded config: `reload()` re-reads it and unloads deleted APIs. */
  runtime: { reload(): Promise<void> };
  /** What the effective-limits read goes through: the loaded APIs, the request path's state and the limit engine. */
  limits: { apis(): readonly CompiledApi[]; state(): GatewayState; engine: Pick<LimitEngine, 'explain'> };
  /** The gateways whose DRL heartbeat is live, per API (in Redis; standalone, this process alone). */
  gateways: { live(apiIds: readonly string[]): Promise<Map<string, string[]>> };
  auth: {
    /** GW_ADMIN_SECRET: `Admin-Auth` and `X-GW-Authorization`. Empty refuses every call. */
    adminSecret: string;
    /** GW_PORTAL_SECRET: the portal's raw `Authorization` value. Empty refuses every call. */
    portalSecret: string;
    bearer: BearerAuthenticator;
  };
  logger: Logger;
  /** Namespace new Keys (and their sessions' policy lookups) belong to. */
  namespace: string;
  /** When given, `gw_admin_requests_total{operation,code}` is registered on it. */
  registry?: Registry;
  /** Largest accepted request body; default MAX_BODY_BYTES (1 MiB). */
  maxBodyBytes?: number;
}

export interface HandlerContext {
  req: IncomingMessage;
  /** Only to ask a client waiting for 100 Continue for its body (readJsonBody); the answer is the Reply. */
  res: ServerResponse;
  deps: AdminDeps;
  /** Raw (still percent-encoded) path parameters; handlers validate them with pathId(). */
  params: Readonly<Record<string, string>>;
  /** The request path without the query string, as the client sent it. */
  path: string;
  /** The request's logger: deps.logger with the request id (`reqId`) the answer carries. */
  log: Logger;
}

export interface Reply {
  status: number;
  body: unknown;
}

export interface Route {
  method: string;
  /** Path segments; `:name` captures one segment. */
  segments: readonly string[];
  /** Metric and log label. */
  operation: string;
  shape: ErrorShape;
  /** What an unexpected failure inside the handler is reported as. */
  failure: ErrorDef;
  handle(ctx: HandlerContext): Promise<Reply>;
  /**
   * A GET that changes what is served (the specification's reload is a GET): HEAD, which
   * monitors and link checkers send as a safe method, is not answered as it, but with 405.
   */
  actsOnGet?: true;
}
