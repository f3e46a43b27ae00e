import './suppress-http-proxy-deprecations.ts';
import { Agent, type ClientRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import httpProxy from 'http-proxy';
import { CLIENT_CLOSED_REQUEST, gatewayErrors, type GatewayError } from '../http/errors.ts';
import { sendError } from '../http/respond.ts';
import { BodyTooLargeError, hasRequestBody, limitedBody, refuseRestOfBody } from '../http/body-limit.ts';
import { refusedAsTooLarge, type ForwardRequest, type ForwardResult, type Forwarder, type ForwarderOptions, type UpgradeForwarder } from './forwarder.ts';
import { forwardedHeaders, removeHopByHopResponseHeaders, removeRateLimitHeaders, upstreamRequestHeaders } from './headers.ts';

class UpstreamTimeoutError extends Error {
  readonly code = 'upstream_timeout';
}

/**
 * The gateway's headers (the request id, X-RateLimit-*) are on the response before proxying;
 * the upstream's of the same names then lose, and all of its X-RateLimit-* when ours are shown.
 */
function filterResponseHeaders(proxyRes: IncomingMessage, _req: IncomingMessage, res: ServerResponse): void {
  removeHopByHopResponseHeaders(proxyRes.headers);
  for (const name of res.getHeaderNames()) delete proxyRes.headers[name];
  if (res.hasHeader('x-ratelimit-limit')) removeRateLimitHeaders(proxyRes.headers);
}

/**
 * The http-proxy forwarder: selectable for ordinary requests (settings.forwarder) and
 * always the one that carries connection upgrades (WebSocket).
 */
export class HttpProxyForwarder implements Forwarder, UpgradeForwarder {
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 128 });
  readonly #proxy = httpProxy.createProxyServer({ agent: this.#agent, changeOrigin: true, xfwd: false });
  readonly #options: ForwarderOptions;

  constructor(options: ForwarderOptions) {
    this.#options = options;
    this.#proxy.on('proxyRes', filterResponseHeaders);
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

  forward(request: ForwardRequest): Promise<ForwardResult> {
    const { req, res } = request;
    const maxBytes = this.#options.maxBodyBytes();
    const refused = refusedAsTooLarge(request, maxBytes);
    if (refused !== null) return Promise.resolve(refused);
    const body = hasRequestBody(req) ? limitedBody(req, maxBytes) : undefined;
    req.headers = upstreamRequestHeaders(req) as IncomingMessage['headers'];
    req.url = request.path;
    for (const headers of [request.rateHeaders, request.answerHeaders]) for (const [name, value] of Object.entries(headers ?? {})) res.setHeader(name, value);
    const started = performance.now();
    return new Promise((resolve) => {
      let upstreamSeconds: number | null = null;
      let error: GatewayError | null = null;
      const fail = (err: unknown): void => {
        error = this.#fail(req, res, err) ?? error;
      };
      res.once('pipe', () => {
        upstreamSeconds = (performance.now() - started) / 1000;
      });
      // A client that left before the answer is no upstream failure (docs/behaviour.md#gateway-answers).
      res.once('close', () => resolve(request.signal.aborted && !res.headersSent ? { status: CLIENT_CLOSED_REQUEST, upstreamSeconds, error: null } : { status: res.statusCode, upstreamSeconds, error }));
      body?.once('error', fail);
      this.#proxy.web(req, res, { target: request.origin, buffer: body }, fail);
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

  /** One agent is shared by every origin, and it keeps no per-origin state to release. */
  retainOrigins(): void {
    // Nothing to release.
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, origin: string, path: string): void {
    // Connection and Upgrade must reach the upstream here: they are the upgrade itself.
    Object.assign(req.headers, forwardedHeaders(req));
    req.url = path;
    this.#proxy.ws(req, socket, head, { target: origin }, () => socket.destroy());
  }

  async close(): Promise<void> {
    this.#proxy.close();
    this.#agent.destroy();
  }
}
