import type { Readable, Writable } from 'node:stream';
import { Pool, errors as undiciErrors } from 'undici';
import type { Dispatcher } from 'undici';
import { gatewayErrors } from '../http/errors.ts';
import { sendError } from '../http/respond.ts';
import { BodyTooLargeError, declaredLengthExceeds, hasRequestBody, limitedBody, refuseRestOfBody } from '../http/body-limit.ts';
import type { ForwardRequest, ForwardResult, Forwarder, ForwarderOptions } from './forwarder.ts';
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
 * The default forwarder: one undici Pool (keep-alive) per upstream origin; request and
 * response bodies are streamed, never buffered.
 */
export class UndiciForwarder implements Forwarder {
  readonly #pools = new Map<string, Pool>();
  readonly #options: ForwarderOptions;

  constructor(options: ForwarderOptions) {
    this.#options = options;
  }

  #pool(origin: string): Pool {
    let pool = this.#pools.get(origin);
    if (pool === undefined) {
      pool = new Pool(origin, { connections: 128, keepAliveTimeout: 30_000 });
      this.#pools.set(origin, pool);
    }
    return pool;
  }

  async forward(request: ForwardRequest): Promise<ForwardResult> {
    const { req, res } = request;
    const maxBytes = this.#options.maxBodyBytes();
    if (declaredLengthExceeds(req, maxBytes)) {
      refuseRestOfBody(req, res);
      sendError(res, gatewayErrors.bodyTooLarge, request.rateHeaders);
      return { status: gatewayErrors.bodyTooLarge.status, upstreamSeconds: null, error: gatewayErrors.bodyTooLarge };
    }
    const timeoutMs = this.#options.timeoutMs();
    const started = performance.now();
    let upstreamSeconds: number | null = null;
    const options: Dispatcher.RequestOptions = {
      path: request.path,
      method: req.method as Dispatcher.HttpMethod,
      headers: upstreamRequestHeaders(req),
      body: hasRequestBody(req) ? (limitedBody(req, maxBytes) as Readable) : null,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: request.signal,
    };
    try {
      await this.#pool(request.origin).stream(options, ({ statusCode, headers }): Writable => {
        upstreamSeconds = (performance.now() - started) / 1000;
        res.writeHead(statusCode, clientResponseHeaders(headers, request.rateHeaders));
        return res;
      });
      return { status: res.statusCode, upstreamSeconds, error: null };
    } catch (err) {
      if (upstreamSeconds !== null || res.headersSent) {
        res.destroy();
        return { status: res.statusCode, upstreamSeconds, error: null };
      }
      const failure = upstreamFailure(err);
      // A body the upstream never took (too large, or the upstream failed mid-way) would
      // leave the client's next keep-alive request stuck behind its unread bytes.
      if (!req.complete) refuseRestOfBody(req, res);
      sendError(res, failure, request.rateHeaders);
      return { status: failure.status, upstreamSeconds: null, error: failure };
    }
  }

  retainOrigins(origins: ReadonlySet<string>): void {
    for (const [origin, pool] of this.#pools) {
      if (origins.has(origin)) continue;
      this.#pools.delete(origin);
      // close() waits for the requests already queued on the pool, then ends its connections.
      pool.close().catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((pool) => pool.close()));
  }
}
