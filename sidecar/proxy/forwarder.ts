import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { declaredLengthExceeds, refuseRestOfBody } from '../http/body-limit.ts';
import { gatewayErrors, type GatewayError } from '../http/errors.ts';
import { sendError } from '../http/respond.ts';

/**
 * How a routed, authorised request reaches its upstream (docs/architecture.md#performance). The gateway decides
 * everything before this point; a forwarder only moves bytes, answers 502/504/413 in the
 * gateway's JSON shape, and reports how it went.
 */
export interface ForwardRequest {
  req: IncomingMessage;
  res: ServerResponse;
  /** Upstream origin, e.g. `http://10.0.0.5:8080`; one connection pool per origin. */
  origin: string;
  /** Upstream path with query string. */
  path: string;
  /** The gateway's X-RateLimit-* for this response; when set, the upstream's are dropped. */
  rateHeaders: Record<string, string> | null;
  /**
   * The gateway's own headers for the answer, whichever it is (the upstream's or the
   * gateway's 413/502/504): the request id. They replace the upstream's of the same name.
   * They go in with the answer's other headers, not by `res.setHeader` beforehand, which
   * sends Node's `writeHead` down a path that merges and re-validates every header.
   */
  answerHeaders: Record<string, string>;
  /** Aborted when the client goes away before its answer is complete (clientGone). */
  signal: AbortSignal;
}

/**
 * A signal aborted when the client goes away before `res` is complete. One per exchange:
 * admission waits on it (throttle, stream slots) and the forwarder ends the upstream request
 * with it, so a request pays for one controller and one listener.
 */
export function clientGone(res: ServerResponse): AbortSignal {
  const abort = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  return abort.signal;
}

export interface ForwardResult {
  /** Status sent to the client (the upstream's, or the gateway's 413/502/504). */
  status: number;
  /** Time from sending the request to the upstream's response headers; null when there was none. */
  upstreamSeconds: number | null;
  /** The gateway's own answer (413, 502, 504) when it gave one instead of the upstream's. */
  error: GatewayError | null;
  /** Why the upstream failed, for the log line of a 502 or 504 (`failureCause`). */
  cause?: string;
}

/**
 * What an operator needs of an upstream failure to tell refused from reset, a name not found or
 * a certificate refused: the error's code (ECONNREFUSED, ECONNRESET, ENOTFOUND,
 * UND_ERR_HEADERS_TIMEOUT, DEPTH_ZERO_SELF_SIGNED_CERT, …), else its class's name. Never its
 * message, which may hold the request's URL, and so a key in its query.
 */
export function failureCause(err: unknown): string {
  if (typeof err !== 'object' || err === null) return 'unknown';
  const { code, name } = err as { code?: unknown; name?: unknown };
  return typeof code === 'string' ? code : typeof name === 'string' ? name : 'unknown';
}

/**
 * A request whose declared length is over `maxBytes` is answered 413 at once, in either
 * forwarder, and the rest of its body is read off and dropped; null when it may go on.
 */
export function refusedAsTooLarge(request: ForwardRequest, maxBytes: number): ForwardResult | null {
  const { req, res } = request;
  if (!declaredLengthExceeds(req, maxBytes)) return null;
  refuseRestOfBody(req, res);
  sendError(res, gatewayErrors.bodyTooLarge, request.rateHeaders, request.answerHeaders);
  return { status: gatewayErrors.bodyTooLarge.status, upstreamSeconds: null, error: gatewayErrors.bodyTooLarge };
}

/**
 * Connections one gateway process opens to one upstream origin at most, in either forwarder;
 * past them a request waits for one, within its upstream timeout (README.md#gateway-settings).
 */
export const CONNECTIONS_PER_ORIGIN = 128;

export interface ForwarderOptions {
  /** Read per request so a settings reload takes effect without rebuilding pools. */
  timeoutMs: () => number;
  maxBodyBytes: () => number;
}

export interface Forwarder {
  forward(request: ForwardRequest): Promise<ForwardResult>;
  /**
   * Called on every config swap with the origins the new routes can reach: per-origin
   * connection state for any other origin is released (in-flight requests finish first).
   */
  retainOrigins(origins: ReadonlySet<string>): void;
  close(): Promise<void>;
}

/** Where an accepted upgrade goes, and what the gateway adds to the upstream's answer. */
export interface UpgradeTarget {
  origin: string;
  path: string;
  answerHeaders: Record<string, string>;
}

export interface UpgradeForwarder {
  /**
   * Carry an accepted connection upgrade (WebSocket) to the upstream. `answerHeaders` (the request
   * id, and the rate headers of its admission) go on the upstream's answer to the client, as on
   * any request's answer. Resolves with how it went once the upstream switched protocols or
   * answered, the gateway answered it (502, 504), or the client left (499).
   */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: UpgradeTarget): Promise<ForwardResult>;
}
