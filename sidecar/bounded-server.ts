import { createServer, type IncomingMessage, type RequestListener, type Server } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { ReloadingTlsFiles } from '../common/tls-files.ts';
import type { Duplex } from 'node:stream';
import { gatewayErrors } from './http/errors.ts';
import { answerClientError, sendError, sendErrorOnSocket } from './http/respond.ts';

/**
 * What one client may hold of a listener before it is answered and cut off: the bytes and
 * the number of its header fields, and the time it may take to send them (a client that
 * trickles its headers, slowloris, would otherwise keep its connection for Node's 60 s
 * default). Envoy's defaults are the model: 100 header fields; the size is Node's own.
 */
export const LISTENER_BOUNDS = {
  maxHeaderBytes: 16 * 1024,
  maxHeaderCount: 100,
  headersTimeoutMs: 10_000,
};

export interface BoundOverrides {
  /** Tests shorten the headers timeout to see it fire. */
  headersTimeoutMs?: number;
}

/**
 * An HTTP server for one of the sidecar's listeners (HTTPS when given `tls`), with the bounds above. Each refusal is
 * answered in the gateway's JSON shape with its code (431, 408, 400) before the connection
 * is closed, and the process goes on serving everyone else.
 */
export function boundedServer(handler: RequestListener, overrides: BoundOverrides = {}, tls?: ReloadingTlsFiles): Server {
  const headersTimeout = overrides.headersTimeoutMs ?? LISTENER_BOUNDS.headersTimeoutMs;
  const options = {
    maxHeaderSize: LISTENER_BOUNDS.maxHeaderBytes,
    headersTimeout,
    // Node checks its timeouts at this interval; its 30 s default would let a slow client
    // keep its connection far past the headers timeout.
    connectionsCheckingInterval: Math.min(1000, headersTimeout),
  };
  const bounded: RequestListener = (req, res) => {
    if (tooManyHeaders(req)) {
      req.resume();
      res.shouldKeepAlive = false;
      sendError(res, gatewayErrors.tooManyHeaders);
      return;
    }
    handler(req, res);
  };
  // An https.Server is an http.Server on TLS: everything below applies to both.
  let server: Server;
  if (tls) {
    const secure = createTlsServer({ ...options, ...tls.serverOptions() }, bounded);
    tls.attach(secure);
    server = secure;
  } else server = createServer(options, bounded);
  // Every field is kept, so the count above sees them all (Node would silently drop past 2000).
  server.maxHeadersCount = 0;
  server.on('clientError', answerClientError);
  return server;
}

const tooManyHeaders = (req: IncomingMessage): boolean => req.rawHeaders.length / 2 > LISTENER_BOUNDS.maxHeaderCount;

/** The same bound for connection upgrades, which never reach the request handler. */
export function boundedUpgrade(handler: (req: IncomingMessage, socket: Duplex, head: Buffer) => void) {
  return (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    if (tooManyHeaders(req)) sendErrorOnSocket(socket, gatewayErrors.tooManyHeaders);
    else handler(req, socket, head);
  };
}
