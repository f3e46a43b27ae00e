import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { ReloadingTlsFiles } from '../common/tls-files.ts';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { continueBody } from './http/body-limit.ts';
import { gatewayErrors, type GatewayError } from './http/errors.ts';
import { refusedTarget } from './http/request-target.ts';
import { requestIdOf } from './http/request-id.ts';
import { upgradesToWebSocket } from './http/websocket-handshake.ts';
import { clientErrorAnswer, gatewayShape, REQUEST_ID_HEADER, sendError, sendErrorOnSocket, type RefusalShape } from './http/respond.ts';

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

export interface ListenerOptions {
  /**
   * The handler tells a client waiting for 100 Continue to send its body, once it has decided
   * to read it (the proxy listener after admission, the admin listener once the credential and
   * the declared length passed: body-limit.ts `continueBody`). Otherwise
   * the listener tells it as soon as the request passes the bounds, as Node would.
   */
  handlerContinues?: boolean;
  /**
   * The shape of the listener's own refusals below, by request-target; the gateway's JSON
   * shape unless given (the admin listener answers in its operations' shapes).
   */
  refusalShape?: RefusalShape;
  /** Told of each refusal the listener answers itself, before any handler (the proxy listener counts them: README.md#monitoring). */
  refused?: (error: GatewayError) => void;
}

/**
 * An HTTP server for one of the sidecar's listeners (HTTPS when given `tls`), with the bounds
 * above. Each refusal is answered in the listener's JSON shape with its code (431, 408, 400) before
 * the connection is closed, and the process goes on serving everyone else. So are the requests
 * Node would otherwise answer itself with an empty body: no Host or two (400), an expectation
 * other than 100-continue (417), CONNECT (501).
 */
export function boundedServer(handler: RequestListener, overrides: BoundOverrides = {}, tls?: ReloadingTlsFiles, listener: ListenerOptions = {}): Server {
  const headersTimeout = overrides.headersTimeoutMs ?? LISTENER_BOUNDS.headersTimeoutMs;
  const shape = listener.refusalShape ?? gatewayShape;
  const options = {
    maxHeaderSize: LISTENER_BOUNDS.maxHeaderBytes,
    headersTimeout,
    // Node checks its timeouts at this interval; its 30 s default would let a slow client
    // keep its connection far past the headers timeout.
    connectionsCheckingInterval: Math.min(1000, headersTimeout),
    // Checked below (`refusedTarget`), to answer in the JSON shape and to count two Hosts too.
    requireHostHeader: false,
    // Only a WebSocket handshake is taken as an upgrade (where the listener has an upgrade
    // handler at all); any other offer, such as `curl --http2`'s h2c, is served as the HTTP/1.1
    // request it also is, its Upgrade ignored as RFC 9110 §7.8 allows and nginx does.
    shouldUpgradeCallback: (req: IncomingMessage): boolean => server.listenerCount('upgrade') > 0 && upgradesToWebSocket(req.headers),
  };
  const connections = new Set<AnsweringSocket>();
  const bounded: RequestListener = (req, res) => {
    const socket = req.socket as AnsweringSocket;
    if (socket[LATEST_ANSWER] === undefined) {
      connections.add(socket);
      socket.once('close', () => connections.delete(socket));
    }
    socket[LATEST_ANSWER] = res;
    const refusal = tooManyHeaders(req) ? gatewayErrors.tooManyHeaders : refusedTarget(req);
    if (refusal !== null) {
      req.resume();
      res.shouldKeepAlive = false;
      listener.refused?.(refusal);
      sendError(res, shape(refusal, req.url ?? null), idOf(req));
      return;
    }
    if (listener.handlerContinues !== true) continueBody(req, res);
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
  server.on('clientError', clientErrorAnswer(shape, listener.refused));
  // With a listener here, Node leaves the 100 Continue to `bounded` (and its handler).
  server.on('checkContinue', bounded);
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    res.shouldKeepAlive = false;
    listener.refused?.(gatewayErrors.expectationFailed);
    sendError(res, shape(gatewayErrors.expectationFailed, req.url ?? null), idOf(req));
  });
  // Without a listener Node would drop the connection unanswered.
  server.on('connect', (req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    listener.refused?.(gatewayErrors.connectNotServed);
    sendErrorOnSocket(socket, shape(gatewayErrors.connectNotServed, req.url ?? null), idOf(req));
  });
  connectionsOf.set(server, connections);
  return server;
}

/**
 * Each connection's latest answer, on its socket, for the drain: a property store per request.
 * A Set of answers with a 'close' listener on each cost a fifth of a request
 * (docs/benchmarks.md#two-builds-side-by-side).
 */
const LATEST_ANSWER = Symbol('latestAnswer');
type AnsweringSocket = Socket & { [LATEST_ANSWER]?: ServerResponse };

const connectionsOf = new WeakMap<Server, ReadonlySet<AnsweringSocket>>();

/** The answers a bounded server has in flight, for its drain (common/listen.ts) to close their connections after them. */
export function* answersInFlight(server: Server): Generator<ServerResponse> {
  for (const socket of connectionsOf.get(server) ?? []) {
    const answer = socket[LATEST_ANSWER];
    if (answer !== undefined && !answer.writableFinished) yield answer;
  }
}

/** Refusals before any handler carry a request id too, as every answer does (README.md#the-sidecar-gw-sidecar). */
const idOf = (req: IncomingMessage): Record<string, string> => ({ [REQUEST_ID_HEADER]: requestIdOf(req) });

const tooManyHeaders = (req: IncomingMessage): boolean => req.rawHeaders.length / 2 > LISTENER_BOUNDS.maxHeaderCount;

/**
 * The same bounds for connection upgrades, which never reach the request handler. Each socket
 * handed over is in `upgraded` while open, for the listener's drain to cut (common/listen.ts).
 */
export function boundedUpgrade(handler: (req: IncomingMessage, socket: Duplex, head: Buffer) => void, upgraded: Set<Duplex>, refused?: (error: GatewayError) => void) {
  return (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    upgraded.add(socket);
    socket.once('close', () => upgraded.delete(socket));
    const refusal = tooManyHeaders(req) ? gatewayErrors.tooManyHeaders : refusedTarget(req);
    if (refusal === null) {
      handler(req, socket, head);
      return;
    }
    refused?.(refusal);
    sendErrorOnSocket(socket, refusal, idOf(req));
  };
}
