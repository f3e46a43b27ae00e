import './suppress-http-proxy-deprecations.ts';
import { Agent, type ClientRequest, type IncomingMessage, type RequestOptions, type ServerResponse } from 'node:http';
import { Readable, type Duplex } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import httpProxy from 'http-proxy';
import { CLIENT_CLOSED_REQUEST, gatewayErrors, type GatewayError } from '../http/errors.ts';
import { sendError, sendErrorOnSocket } from '../http/respond.ts';
import { BodyTooLargeError, hasRequestBody, limitedBody, refuseRestOfBody } from '../http/body-limit.ts';
import { CONNECTIONS_PER_ORIGIN, failureCause, refusedAsTooLarge, type ForwardRequest, type ForwardResult, type Forwarder, type ForwarderOptions, type UpgradeForwarder, type UpgradeTarget } from './forwarder.ts';
import { removeHopByHopResponseHeaders, removeRateLimitHeaders, upstreamRequestHeaders, wantsClose } from './headers.ts';
import { completesWebSocketHandshake, expectedWebSocketAccept } from '../http/websocket-handshake.ts';

class UpstreamTimeoutError extends Error {
  readonly code = 'upstream_timeout';
}

/** Requests whose client asked to close its connection after the answer (`Connection: close`). */
const closing = new WeakSet<IncomingMessage>();
/** Methods whose request http-proxy gives `Content-Length: 0` when it has none (its deleteLength pass). */
const lengthForced = new Set(['DELETE', 'OPTIONS']);

/**
 * The gateway's headers (the request id, X-RateLimit-*) are on the response before proxying;
 * the upstream's of the same names then lose, and all of its X-RateLimit-* when ours are shown.
 * The client's connection is the client's hop: its own `Connection` is answered (RFC 9112
 * §9.6), never the upstream's (whose tokens name the upstream hop's headers, dropped here). An
 * upstream that stops before its whole body cuts the client's answer short, as it is.
 */
function filterResponseHeaders(proxyRes: IncomingMessage, req: IncomingMessage, res: ServerResponse): void {
  removeHopByHopResponseHeaders(proxyRes.headers);
  for (const name of res.getHeaderNames()) delete proxyRes.headers[name];
  if (res.hasHeader('x-ratelimit-limit')) removeRateLimitHeaders(proxyRes.headers);
  proxyRes.headers.connection = closing.has(req) ? 'close' : 'keep-alive';
  proxyRes.once('close', () => {
    if (!proxyRes.complete) res.destroy();
  });
}

/**
 * The gateway's headers on the upstream's answer to an upgrade, in place before http-proxy
 * writes it to the client: the request id replaces the upstream's, and the admission's rate
 * headers replace its X-RateLimit-* (as `clientResponseHeaders` does for a request's answer).
 */
function stampUpgradeAnswer(upstreamAnswer: IncomingMessage, answerHeaders: Record<string, string>): void {
  if ('x-ratelimit-limit' in answerHeaders) removeRateLimitHeaders(upstreamAnswer.headers);
  Object.assign(upstreamAnswer.headers, answerHeaders);
}

/**
 * http-proxy pipes an upstream's answer to an upgrade that is not a 101 to the client with no
 * timeout of its own: an upstream that stopped sending its body held the client's connection
 * and its own for good. Its body is cut, as any answer's (README.md#gateway-settings), once the
 * upstream pauses it longer than the upstream timeout; time the client holds it back (its
 * socket full) is not counted. One timer, on this rare path only.
 */
function cutWhenStalled(upstreamAnswer: IncomingMessage, socket: Duplex, timeoutMs: number): void {
  const stalled = setTimeout(() => {
    if (socket.writableNeedDrain) {
      stalled.refresh();
      return;
    }
    upstreamAnswer.destroy();
    socket.destroy();
  }, timeoutMs);
  upstreamAnswer.on('data', () => stalled.refresh());
  upstreamAnswer.once('close', () => clearTimeout(stalled));
}

/** An upgrade handed to http-proxy: what its answer carries, and how it went once known. */
interface PendingUpgrade {
  answerHeaders: Record<string, string>;
  /** The Sec-WebSocket-Accept a 101 must carry (null: the client sent no key, so no 101 completes it). */
  expectedAccept: string | null;
  settled: boolean;
  /** The gateway answered it (502, 504): its answer is on its way out, the socket closes after it. */
  answeredHere: boolean;
  settle: (result: ForwardResult) => void;
}

/** Reports an upgrade's outcome once: the first of the upstream's answer, the gateway's, or the client leaving. */
function settle(pending: PendingUpgrade, result: ForwardResult): void {
  if (pending.settled) return;
  pending.settled = true;
  pending.settle(result);
}

/**
 * The request's body as the upstream request carries it, its framing set in `headers`. Node's
 * client frames a body by itself only on the methods it expects one on: a GET's chunked body
 * would reach the upstream unframed, to be read there as a request of its own that no check
 * ever saw (RFC 9112 §11.2). So a chunked body goes on chunked, said in the headers; a DELETE's
 * or an OPTIONS' (rare), to which http-proxy would give a length of 0, is read whole (within
 * the body limit) and sent with its length.
 */
async function framedBody(req: IncomingMessage, res: ServerResponse, maxBytes: number, headers: Record<string, string | string[]>): Promise<Readable | undefined> {
  if (!hasRequestBody(req)) return undefined;
  const limited = limitedBody(req, res, maxBytes);
  if (req.headers['content-length'] !== undefined) return limited;
  if (!lengthForced.has(req.method ?? '')) {
    headers['transfer-encoding'] = 'chunked';
    return limited;
  }
  const whole = await buffer(limited);
  headers['content-length'] = String(whole.length);
  return Readable.from([whole]);
}

type AddRequest = (this: Agent, req: ClientRequest, options: RequestOptions) => void;
const addRequest = (Agent.prototype as unknown as { addRequest: AddRequest }).addRequest;
/** Node's own says whether it keeps a freed socket; its types have it return nothing. */
type KeepSocketAlive = (this: Agent, socket: Duplex) => boolean;
const keepSocketAlive = (Agent.prototype as unknown as { keepSocketAlive: KeepSocketAlive }).keepSocketAlive;

/**
 * An agent that tells whether the request it was last given waits for its connection: in line,
 * all of its origin's sockets busy, or while a new one opens. http-proxy hands its upstream
 * request out only once it has a socket (its 'proxyReq' event), too late for one that waits, and
 * Node starts a request's socket timeout only once its connection is open.
 */
class LineAgent extends Agent {
  #waiting: ClientRequest | null = null;
  #opening = false;
  #retired = false;

  addRequest(req: ClientRequest, options: RequestOptions): void {
    this.#waiting = null;
    this.#opening = false;
    addRequest.call(this, req, options);
    if (this.#opening) this.#waiting = req;
    // The agent appends a request that has to wait to its origin's line.
    else for (const name in this.requests) if (this.requests[name]?.at(-1) === req) this.#waiting = req;
  }

  override createConnection(options: RequestOptions, callback?: (err: Error | null, stream: Duplex) => void): Duplex | null | undefined {
    this.#opening = true;
    return super.createConnection(options, callback);
  }

  /** The request `http.request` just gave it, if that one waits; asked right after it returns. */
  takeWaiting(): ClientRequest | null {
    const waiting = this.#waiting;
    this.#waiting = null;
    return waiting;
  }

  /**
   * Its idle connections close now; the busy ones serve the requests in line, then close as
   * they come free (the agent hands a freed socket to a waiting request before keeping it).
   */
  retire(): void {
    this.#retired = true;
    for (const sockets of Object.values(this.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
  }

  override keepSocketAlive(socket: Duplex): boolean {
    return !this.#retired && keepSocketAlive.call(this, socket);
  }
}

/**
 * The http-proxy forwarder: selectable for ordinary requests (settings.forwarder) and
 * always the one that carries connection upgrades (WebSocket).
 */
export class HttpProxyForwarder implements Forwarder, UpgradeForwarder {
  /** One keep-alive pool per upstream origin, as undici's (README.md#the-sidecar-gw-sidecar). */
  readonly #agents = new Map<string, LineAgent>();
  readonly #proxy = httpProxy.createProxyServer({ changeOrigin: true, xfwd: false });
  readonly #options: ForwarderOptions;
  /** Each upgrade's answer headers and report, until http-proxy opens its upstream request. */
  readonly #upgrades = new WeakMap<IncomingMessage, PendingUpgrade>();

  constructor(options: ForwarderOptions) {
    this.#options = options;
    this.#proxy.on('proxyRes', filterResponseHeaders);
    // http-proxy emits no event with the upstream's answer to an upgrade, but it listens for that
    // answer only after this event: listeners added here run first, while the headers can change.
    this.#proxy.on('proxyReqWs', (proxyReq: ClientRequest, req: IncomingMessage, socket: Duplex) => {
      const pending = this.#upgrades.get(req);
      if (pending === undefined) return;
      this.#upgrades.delete(req);
      this.#watchUpgrade(proxyReq, socket, pending);
    });
    this.#proxy.on('proxyReq', (proxyReq: ClientRequest, _req: IncomingMessage, res: ServerResponse) => {
      // The upstream socket's idle time. A client that does not read holds the answer back and
      // idles the socket too, which is no upstream stall: it is let be, and the socket's next
      // activity starts the wait again (as undici's body timeout, which counts no paused time).
      proxyReq.setTimeout(this.#options.timeoutMs(), () => {
        if (!res.destroyed && res.headersSent && res.writableNeedDrain) return;
        proxyReq.destroy(new UpstreamTimeoutError('upstream timed out'));
      });
    });
    // Errors are answered through each call's callback; this keeps a stray one from being unhandled.
    this.#proxy.on('error', () => undefined);
  }

  async forward(request: ForwardRequest): Promise<ForwardResult> {
    const { req, res } = request;
    const maxBytes = this.#options.maxBodyBytes();
    const refused = refusedAsTooLarge(request, maxBytes);
    if (refused !== null) return refused;
    for (const headers of [request.rateHeaders, request.answerHeaders]) for (const [name, value] of Object.entries(headers ?? {})) res.setHeader(name, value);
    if (wantsClose(req)) closing.add(req);
    const headers = upstreamRequestHeaders(req);
    let body: Readable | undefined;
    try {
      body = await framedBody(req, res, maxBytes, headers);
      // A body that came whole with its headers may have passed the limit already, its error
      // emitted before anyone listened: http-proxy would pipe the dead stream and wait.
      if (body?.errored) throw body.errored;
    } catch (err) {
      const error = this.#fail(req, res, err);
      return { status: error === null ? CLIENT_CLOSED_REQUEST : res.statusCode, upstreamSeconds: null, error };
    }
    req.headers = headers as IncomingMessage['headers'];
    req.url = request.path;
    const started = performance.now();
    return new Promise((resolve) => {
      let upstreamSeconds: number | null = null;
      let error: GatewayError | null = null;
      let cause: string | undefined;
      let gaveUp = false;
      const fail = (err: unknown): void => {
        if (gaveUp) return;
        const answered = this.#fail(req, res, err);
        if (answered === null) return;
        error = answered;
        cause = failureCause(err);
      };
      res.once('pipe', () => {
        upstreamSeconds = (performance.now() - started) / 1000;
      });
      // A client that left before the answer is no upstream failure (docs/behaviour.md#gateway-answers).
      res.once('close', () => resolve(request.signal.aborted && !res.headersSent ? { status: CLIENT_CLOSED_REQUEST, upstreamSeconds, error: null } : { status: res.statusCode, upstreamSeconds, error, cause }));
      body?.once('error', fail);
      const agent = this.#agentFor(request.origin);
      this.#proxy.web(req, res, { target: request.origin, agent, buffer: body }, fail);
      const waiting = agent.takeWaiting();
      if (waiting === null) return;
      // The socket's idle timeout starts only once its connection is open: a request that waits
      // for one (in line, or while it opens) has its deadline from the hand-over to the answer's
      // headers (README.md#gateway-settings). Destroyed while in line, Node never sends it: the
      // agent passes the socket on at its turn.
      const deadline = setTimeout(() => {
        const err = new UpstreamTimeoutError('upstream timed out');
        const inLine = waiting.socket === null;
        waiting.destroy(err);
        if (!inLine) return;
        fail(err);
        gaveUp = true;
      }, this.#options.timeoutMs());
      waiting.once('response', () => clearTimeout(deadline));
      res.once('close', () => {
        clearTimeout(deadline);
        // Nobody would read its answer: one still in line is never sent, body and all.
        if (request.signal.aborted) waiting.destroy();
      });
    });
  }

  /** Answers a failed exchange; the error answered, or null when the upstream's answer had begun. */
  #fail(req: IncomingMessage, res: ServerResponse, err: unknown): GatewayError | null {
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return null;
    }
    // A body the upstream never took would leave the client's next keep-alive request stuck behind it.
    if (!req.complete) refuseRestOfBody(req, res);
    const error = err instanceof BodyTooLargeError ? gatewayErrors.bodyTooLarge
      : err instanceof UpstreamTimeoutError ? gatewayErrors.upstreamTimeout : gatewayErrors.upstreamUnreachable;
    sendError(res, error);
    return error;
  }

  #agentFor(origin: string): LineAgent {
    let agent = this.#agents.get(origin);
    if (agent === undefined) {
      agent = new LineAgent({ keepAlive: true, maxSockets: CONNECTIONS_PER_ORIGIN });
      this.#agents.set(origin, agent);
    }
    return agent;
  }

  retainOrigins(origins: ReadonlySet<string>): void {
    for (const [origin, agent] of this.#agents) {
      if (origins.has(origin)) continue;
      this.#agents.delete(origin);
      agent.retire();
    }
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, { origin, path, answerHeaders }: UpgradeTarget): Promise<ForwardResult> {
    // Connection and Upgrade must reach the upstream here: they are the upgrade itself. Every
    // other hop-by-hop header stays on the client's hop, as on any request.
    const protocol = req.headers.upgrade;
    req.headers = { ...upstreamRequestHeaders(req), connection: 'Upgrade', ...(protocol === undefined ? {} : { upgrade: protocol }) } as IncomingMessage['headers'];
    req.url = path;
    // A client that left during admission is never sent upstream (README.md#the-sidecar-gw-sidecar).
    if (socket.destroyed) return Promise.resolve({ status: CLIENT_CLOSED_REQUEST, upstreamSeconds: null, error: null });
    return new Promise((resolve) => {
      const pending: PendingUpgrade = { answerHeaders, expectedAccept: expectedWebSocketAccept(req.headers), settled: false, answeredHere: false, settle: resolve };
      this.#upgrades.set(req, pending);
      this.#proxy.ws(req, socket, head, { target: origin, agent: this.#agentFor(origin) }, () => {
        // Before any answer, the upstream could not be reached; after the upstream's, the tunnel broke.
        if (!pending.settled) this.#answerUpgrade(socket, pending, gatewayErrors.upstreamUnreachable);
        else if (!pending.answeredHere) socket.destroy();
      });
      // http-proxy dropped it without asking the upstream (not a GET WebSocket handshake).
      if (this.#upgrades.delete(req)) settle(pending, { status: gatewayErrors.badUpgrade.status, upstreamSeconds: null, error: gatewayErrors.badUpgrade });
    });
  }

  /**
   * An upgrade's upstream request, from the hand-over until the upstream answers it (101 or any
   * response): within the upstream timeout, its wait for a connection included, as any request
   * (README.md#gateway-settings); a client that leaves first takes its upstream request with it.
   * Once switched, the tunnel is the client's and the upstream's, with no timeout of ours.
   */
  #watchUpgrade(proxyReq: ClientRequest, socket: Duplex, pending: PendingUpgrade): void {
    let upgraded = false;
    const answered = (upstreamAnswer: IncomingMessage): void => {
      clearTimeout(deadline);
      stampUpgradeAnswer(upstreamAnswer, pending.answerHeaders);
      settle(pending, { status: upstreamAnswer.statusCode ?? 101, upstreamSeconds: null, error: null });
    };
    // http-proxy switches the client's connection over on any 101, in an 'upgrade' listener of
    // its own added after this one. A 101 that does not complete this WebSocket handshake never
    // reaches it: the client gets the gateway's 502, and the upstream connection is closed.
    const emit = proxyReq.emit;
    proxyReq.emit = ((event: string | symbol, ...args: unknown[]): boolean => {
      if (event !== 'upgrade') return emit.call(proxyReq, event, ...args);
      const [upstreamAnswer, upstreamSocket] = args as [IncomingMessage, Duplex];
      if (completesWebSocketHandshake(upstreamAnswer.statusCode, upstreamAnswer.headers, pending.expectedAccept)) return emit.call(proxyReq, event, ...args);
      clearTimeout(deadline);
      upstreamSocket.destroy();
      this.#answerUpgrade(socket, pending, gatewayErrors.upstreamBadUpgrade);
      return true;
    }) as ClientRequest['emit'];
    proxyReq.once('upgrade', (upstreamAnswer: IncomingMessage, upstreamSocket: Duplex) => {
      upgraded = true;
      // http-proxy ends the upstream's side when the client's ends or fails, not when it is cut
      // (a gateway's drain): the tunnel's upstream connection goes with it.
      socket.once('close', () => upstreamSocket.destroy());
      // The tunnel reads the client from here on (http-proxy's pipe resumes it).
      socket.pause();
      socket.off('data', holdEarly);
      socket.off('end', left);
      answered(upstreamAnswer);
    });
    proxyReq.once('response', (upstreamAnswer: IncomingMessage) => {
      answered(upstreamAnswer);
      cutWhenStalled(upstreamAnswer, socket, this.#options.timeoutMs());
    });
    const deadline = setTimeout(() => {
      this.#answerUpgrade(socket, pending, gatewayErrors.upstreamTimeout);
      proxyReq.destroy(new UpstreamTimeoutError('upstream timed out'));
    }, this.#options.timeoutMs());
    // Destroyed while it waits for a connection, it is never sent; after a response of the
    // upstream's that was read whole, destroying it does nothing.
    const gone = (): void => {
      clearTimeout(deadline);
      if (!upgraded) proxyReq.destroy();
      settle(pending, { status: CLIENT_CLOSED_REQUEST, upstreamSeconds: null, error: null });
    };
    // A client that closes its side of the connection is only seen reading it, and nothing reads
    // it until the tunnel opens. The client sends nothing before the answer (RFC 6455 §4.1): it
    // is read till then, and whatever it sends all the same is put back, the reading stopped
    // (the deadline still ends a wait that this no longer sees).
    const holdEarly = (chunk: Buffer): void => {
      socket.pause();
      socket.off('data', holdEarly);
      socket.unshift(chunk);
    };
    const left = (): void => {
      if (pending.settled) return;
      gone();
      socket.destroy();
    };
    socket.on('data', holdEarly);
    socket.once('end', left);
    socket.once('close', gone);
  }

  /** The gateway's own answer to an upgrade the upstream did not answer (docs/behaviour.md#gateway-answers). */
  #answerUpgrade(socket: Duplex, pending: PendingUpgrade, error: GatewayError): void {
    if (pending.settled) return;
    pending.answeredHere = true;
    settle(pending, { status: error.status, upstreamSeconds: null, error });
    sendErrorOnSocket(socket, error, pending.answerHeaders);
  }

  async close(): Promise<void> {
    this.#proxy.close();
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }
}
