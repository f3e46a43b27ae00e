import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { REQUEST_ID_HEADER } from '../http/respond.ts';

/**
 * Header rules shared by both forwarders: hop-by-hop headers (RFC 9110 §7.6.1, plus the
 * ones named in `Connection`) stay on their own hop, `X-Forwarded-*` describe the client
 * hop to the upstream, and the gateway's own X-RateLimit-* replace the upstream's.
 */

const hopByHop = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  // The gateway answers `Expect: 100-continue` itself, once the request is admitted (body-limit.ts).
  'expect',
]);

const rateLimitPrefix = 'x-ratelimit-';

function connectionTokens(value: string | string[] | undefined): Set<string> | null {
  // Nearly every request and answer says just this, which names a hop-by-hop header already:
  // nothing more to drop, and no split, array and Set on every exchange.
  if (value === undefined || value === 'keep-alive') return null;
  const joined = Array.isArray(value) ? value.join(',') : value;
  const tokens = joined.split(',').map((t) => t.trim().toLowerCase()).filter((t) => t.length > 0);
  return tokens.length > 0 ? new Set(tokens) : null;
}

function appendForwardedFor(existing: string | string[] | undefined, address: string | undefined): string {
  const client = address ?? '';
  if (existing === undefined) return client;
  return `${Array.isArray(existing) ? existing.join(', ') : existing}, ${client}`;
}

/** The `X-Forwarded-*` trio for a client request (appended to / kept from earlier proxies). */
export function forwardedHeaders(req: IncomingMessage): Record<string, string> {
  const headers = req.headers;
  const proto = (req.socket as Partial<TLSSocket>).encrypted ? 'https' : 'http';
  return {
    'x-forwarded-for': appendForwardedFor(headers['x-forwarded-for'], req.socket.remoteAddress),
    'x-forwarded-proto': firstValue(headers['x-forwarded-proto']) ?? proto,
    'x-forwarded-host': firstValue(headers['x-forwarded-host']) ?? headers.host ?? '',
  };
}

function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** Whether the client asked to close its connection after this answer (`Connection: close`, or HTTP/1.0 without keep-alive). */
export function wantsClose(req: IncomingMessage): boolean {
  const tokens = connectionTokens(req.headers.connection);
  if (req.httpVersion === '1.0') return !(tokens?.has('keep-alive') ?? req.headers.connection === 'keep-alive');
  return tokens?.has('close') ?? false;
}

/**
 * Headers for the upstream request: no hop-by-hop, no Host (the forwarder sets the upstream's),
 * X-Forwarded-* set. The request id is the gateway's own (sidecar/http/request-id.ts), as the
 * X-Forwarded-* are: a client that names it in Connection does not keep it from the upstream.
 */
export function upstreamRequestHeaders(req: IncomingMessage): Record<string, string | string[]> {
  const named = connectionTokens(req.headers.connection);
  named?.delete(REQUEST_ID_HEADER);
  const out: Record<string, string | string[]> = {};
  const source: IncomingHttpHeaders = req.headers;
  for (const name in source) {
    const value = source[name];
    if (value === undefined || name === 'host' || hopByHop.has(name) || named?.has(name)) continue;
    out[name] = value;
  }
  Object.assign(out, forwardedHeaders(req));
  return out;
}

/**
 * Headers for the client response: the upstream's minus hop-by-hop, with our rate headers
 * replacing theirs, and the gateway's own (the request id) replacing any of the same name.
 */
export function clientResponseHeaders(
  upstream: Record<string, string | string[] | undefined>,
  rateHeaders: Record<string, string> | null,
  answerHeaders: Record<string, string>,
): OutgoingHttpHeaders {
  const named = connectionTokens(upstream.connection);
  const out: OutgoingHttpHeaders = {};
  for (const name in upstream) {
    const value = upstream[name];
    if (value === undefined || hopByHop.has(name) || named?.has(name)) continue;
    if (rateHeaders !== null && name.startsWith(rateLimitPrefix)) continue;
    out[name] = value;
  }
  if (rateHeaders !== null) Object.assign(out, rateHeaders);
  return Object.assign(out, answerHeaders);
}

/**
 * For http-proxy, which copies upstream response headers itself: drop the hop-by-hop ones
 * it leaves (it manages Connection and Transfer-Encoding on its own).
 */
export function removeHopByHopResponseHeaders(headers: Record<string, unknown>): void {
  const named = connectionTokens(headers.connection as string | string[] | undefined);
  for (const name of Object.keys(headers)) {
    if (name === 'connection' || name === 'transfer-encoding') continue;
    if (hopByHop.has(name) || named?.has(name)) delete headers[name];
  }
}

/** Drop the upstream's X-RateLimit-* in place (for forwarders that write upstream headers themselves). */
export function removeRateLimitHeaders(headers: Record<string, unknown>): void {
  for (const name of Object.keys(headers)) {
    if (name.startsWith(rateLimitPrefix)) delete headers[name];
  }
}
