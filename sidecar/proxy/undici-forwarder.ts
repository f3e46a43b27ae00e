import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { buildConnector, Pool, errors as undiciErrors } from 'undici';
import type { Dispatcher } from 'undici';
import { CLIENT_CLOSED_REQUEST, gatewayErrors } from '../http/errors.ts';
import { sendError } from '../http/respond.ts';
import { BodyTooLargeError, hasRequestBody, limitedBody, refuseRestOfBody } from '../http/body-limit.ts';
import { CONNECTIONS_PER_ORIGIN, failureCause, refusedAsTooLarge, type ForwardRequest, type ForwardResult, type Forwarder, type ForwarderOptions } from './forwarder.ts';
import { clientResponseHeaders, upstreamRequestHeaders } from './headers.ts';

/** Which gateway error an upstream failure before the response headers becomes. */
function upstreamFailure(err: unknown): typeof gatewayErrors.upstreamTimeout {
  if (err instanceof BodyTooLargeError) return gatewayErrors.bodyTooLarge;
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.ConnectTimeoutError) {
    return gatewayErrors.upstreamTimeout;
  }
  return gatewayErrors.upstreamUnreachable;
}

/**
 * One request's way through undici, as a dispatch handler: the upstream's answer is written
 * to the client as it arrives, with the upstream paused while the client's socket is full.
 * It is undici's own handler interface, not its `stream()` API: that API's per-request
 * wrapper (an AsyncResource with its abort wiring) left a tenth of everything a young GC
 * found alive under load, so V8 promoted it and ran full collections several times a
 * second (docs/benchmarks.md#tail).
 */
/**
 * An upstream's interim answer, passed on where the client's hop has one: 102 Processing and
 * 103 Early Hints (its Link headers). A 100 Continue is the client's hop's own business (the
 * gateway answers the client's Expect itself, once the request is admitted: body-limit.ts),
 * and others have no meaning across a proxy: dropped.
 */
function forwardInterim(res: ServerResponse, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
  if (statusCode === 102) res.writeProcessing();
  else if (statusCode === 103 && headers.link !== undefined) res.writeEarlyHints({ link: headers.link });
}

/**
 * A wait before a request reaches its connection shorter than this is left to undici's headers
 * timeout (which then runs at most this much over): a request on an open keep-alive connection
 * starts at once and pays for no timer of its own.
 */
const WAIT_WORTH_A_TIMER_MS = 1;

class UpstreamExchange implements Dispatcher.DispatchHandler {
  readonly #request: ForwardRequest;
  readonly #settle: (result: ForwardResult) => void;
  readonly #started = performance.now();
  readonly options: Dispatcher.DispatchOptions;
  /** The line it waits in for a connection of its origin (OriginPool), while it does. */
  #line: Set<UpstreamExchange> | null = null;
  #deadline: NodeJS.Timeout | undefined;
  #upstreamSeconds: number | null = null;
  #controller: Dispatcher.DispatchController | null = null;
  #awaitingDrain = false;
  #settled = false;
  /** The client left: the upstream request is ended with it. */
  readonly #onClientGone = (): void => this.#controller?.abort(new Error('the client closed the connection'));
  readonly #onDrain = (): void => {
    this.#awaitingDrain = false;
    this.#controller?.resume();
  };

  /**
   * It gave up waiting for a connection (out of time, or its client left): never sent, answered
   * now. Made only for a request that waits, so one sent at once allocates no closure for it.
   */
  #giveUp: (() => void) | null = null;

  constructor(request: ForwardRequest, options: Dispatcher.DispatchOptions, settle: (result: ForwardResult) => void) {
    this.#request = request;
    this.options = options;
    this.#settle = settle;
  }

  /**
   * Wait in `line` for a connection, for no longer than the upstream timeout (it runs from the
   * hand-over, as for a request sent at once): a timer a request pays for only when it waits
   * (README.md#gateway-settings).
   */
  joinLine(line: Set<UpstreamExchange>): void {
    this.#line = line;
    line.add(this);
    const giveUp = (): void => {
      this.leaveLine();
      const { signal } = this.#request;
      this.onResponseError(null, signal.aborted ? new Error('the client closed the connection') : new undiciErrors.HeadersTimeoutError());
    };
    this.#giveUp = giveUp;
    this.#deadline = setTimeout(giveUp, this.options.headersTimeout ?? 0);
    this.#request.signal.addEventListener('abort', giveUp, { once: true });
  }

  /** Out of the line: what is left of its time is kept from its start (onRequestStart). */
  leaveLine(): void {
    if (this.#line === null) return;
    this.#line.delete(this);
    this.#line = null;
    clearTimeout(this.#deadline);
    if (this.#giveUp !== null) this.#request.signal.removeEventListener('abort', this.#giveUp);
    this.#giveUp = null;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    const { signal } = this.#request;
    if (signal.aborted) this.#onClientGone();
    else signal.addEventListener('abort', this.#onClientGone, { once: true });
    // undici's headers timeout starts now, on the connection, in full. A request that first
    // waited (for a connection to open, or in line) has only what is left of its time: the
    // timer that ends it then is paid for only on that path (README.md#gateway-settings).
    const waited = performance.now() - this.#started;
    if (waited >= WAIT_WORTH_A_TIMER_MS) {
      this.#deadline = setTimeout(() => controller.abort(new undiciErrors.HeadersTimeoutError()), Math.max(1, (this.options.headersTimeout ?? 0) - waited));
    }
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    const { res, rateHeaders, answerHeaders } = this.#request;
    // An interim answer, the final one still to come (RFC 9110 §15.2).
    if (statusCode < 200) return forwardInterim(res, statusCode, headers);
    clearTimeout(this.#deadline);
    this.#upstreamSeconds = (performance.now() - this.#started) / 1000;
    res.writeHead(statusCode, clientResponseHeaders(headers, rateHeaders, answerHeaders));
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#request.res.write(chunk) || this.#awaitingDrain) return;
    this.#awaitingDrain = true;
    controller.pause();
    this.#request.res.once('drain', this.#onDrain);
  }

  onResponseEnd(): void {
    const { res } = this.#request;
    res.end();
    this.#finish({ status: res.statusCode, upstreamSeconds: this.#upstreamSeconds, error: null });
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, err: Error): void {
    const { req, res, rateHeaders, answerHeaders } = this.#request;
    if (this.#upstreamSeconds !== null || res.headersSent) {
      // The answer had begun: the client's connection ends with it, cut short.
      res.destroy();
      this.#finish({ status: res.statusCode, upstreamSeconds: this.#upstreamSeconds, error: null });
      return;
    }
    if (this.#request.signal.aborted) {
      // The client left before the answer (its leaving aborted the upstream request): no
      // upstream failure, and nobody to answer.
      res.destroy();
      this.#finish({ status: CLIENT_CLOSED_REQUEST, upstreamSeconds: null, error: null });
      return;
    }
    const failure = upstreamFailure(err);
    // A body the upstream never took (too large, or the upstream failed mid-way) would
    // leave the client's next keep-alive request stuck behind its unread bytes.
    if (!req.complete) refuseRestOfBody(req, res);
    sendError(res, failure, rateHeaders, answerHeaders);
    this.#finish({ status: failure.status, upstreamSeconds: null, error: failure, cause: failureCause(err) });
  }

  #finish(result: ForwardResult): void {
    if (this.#settled) return;
    this.#settled = true;
    clearTimeout(this.#deadline);
    this.#request.signal.removeEventListener('abort', this.#onClientGone);
    if (this.#awaitingDrain) this.#request.res.off('drain', this.#onDrain);
    this.#settle(result);
  }
}

/**
 * One origin's undici Pool, and the line of requests waiting for one of its connections.
 * undici would queue them itself, but its timeouts start only once a request is on a
 * connection: behind a hung upstream, a queued request waited for those ahead of it to time
 * out first, and was still sent after its own client had been answered. Here a request waits
 * only while the pool has said it is full (its dispatch returned false, until its 'drain'),
 * and leaves the line, never sent, when its time is up.
 */
class OriginPool {
  readonly #pool: Pool;
  #full = false;
  readonly #line = new Set<UpstreamExchange>();
  /** Set once the origin is retired: the pool closes when its line is empty. */
  #retired: (() => void) | null = null;

  /** undici's connector, made again only when the upstream timeout it keeps to changes. */
  #connector: { timeoutMs: number; connect: buildConnector.connector } | null = null;

  /**
   * `timeoutMs`: the upstream timeout, read as each connection opens. undici's own connect
   * timeout is a fixed 10 s: an upstream that never answered the connection (a pod gone, its
   * address dropping packets) was answered 504 after 10 s whatever the setting.
   */
  constructor(origin: string, timeoutMs: () => number) {
    const connect: buildConnector.connector = (options, callback) => {
      const timeout = timeoutMs();
      if (this.#connector?.timeoutMs !== timeout) this.#connector = { timeoutMs: timeout, connect: buildConnector({ timeout }) };
      this.#connector.connect(options, callback);
    };
    this.#pool = new Pool(origin, { connections: CONNECTIONS_PER_ORIGIN, keepAliveTimeout: 30_000, connect });
    this.#pool.on('drain', this.#onDrain);
  }

  dispatch(exchange: UpstreamExchange): void {
    if (this.#full) exchange.joinLine(this.#line);
    else this.#send(exchange);
  }

  #send(exchange: UpstreamExchange): void {
    try {
      if (!this.#pool.dispatch(exchange.options, exchange)) this.#full = true;
    } catch (err) {
      exchange.onResponseError(null, err as Error);
    }
  }

  readonly #onDrain = (): void => {
    this.#full = false;
    for (const exchange of this.#line) {
      if (this.#full) break;
      exchange.leaveLine();
      this.#send(exchange);
    }
    if (this.#line.size === 0) this.#retired?.();
  };

  /** Closes the pool once the requests waiting for it are sent (or given up), and those sent are answered. */
  retire(): Promise<void> {
    const closed = new Promise<void>((resolve) => {
      this.#retired = () => {
        this.#retired = null;
        resolve(this.#pool.close());
      };
    });
    if (this.#line.size === 0) this.#retired?.();
    return closed;
  }
}

/**
 * The default forwarder: one undici Pool (keep-alive) per upstream origin; request and
 * response bodies are streamed, never buffered.
 */
export class UndiciForwarder implements Forwarder {
  readonly #pools = new Map<string, OriginPool>();
  readonly #options: ForwarderOptions;

  constructor(options: ForwarderOptions) {
    this.#options = options;
  }

  #pool(origin: string): OriginPool {
    let pool = this.#pools.get(origin);
    if (pool === undefined) {
      pool = new OriginPool(origin, this.#options.timeoutMs);
      this.#pools.set(origin, pool);
    }
    return pool;
  }

  forward(request: ForwardRequest): Promise<ForwardResult> {
    const { req, res } = request;
    const maxBytes = this.#options.maxBodyBytes();
    const refused = refusedAsTooLarge(request, maxBytes);
    if (refused !== null) return Promise.resolve(refused);
    const timeoutMs = this.#options.timeoutMs();
    const options: Dispatcher.DispatchOptions = {
      path: request.path,
      method: req.method as Dispatcher.HttpMethod,
      headers: upstreamRequestHeaders(req),
      body: hasRequestBody(req) ? (limitedBody(req, res, maxBytes) as Readable) : null,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    };
    return new Promise((resolve) => {
      this.#pool(request.origin).dispatch(new UpstreamExchange(request, options, resolve));
    });
  }

  retainOrigins(origins: ReadonlySet<string>): void {
    for (const [origin, pool] of this.#pools) {
      if (origins.has(origin)) continue;
      this.#pools.delete(origin);
      pool.retire().catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((pool) => pool.retire()));
  }
}
