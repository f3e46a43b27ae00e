/**
 * Every error the proxy listener answers (docs/behaviour.md#gateway-answers plus the gateway's own), defined once
 * with a stable code and status. Bodies are serialised here, at load, so the request path
 * only writes a ready buffer.
 */
export interface GatewayError {
  code: string;
  status: number;
  /** What the body says, for a listener that answers in a shape of its own (bounded-server.ts). */
  message: string;
  body: Buffer;
}

function define(code: string, status: number, message: string): GatewayError {
  return { code, status, message, body: Buffer.from(JSON.stringify({ error: message })) };
}

/** nginx's "client closed request": a request whose client left before its answer; counted, never sent (there is nobody to send it to). */
export const CLIENT_CLOSED_REQUEST = 499;

export const gatewayErrors = {
  notFound: define('not_found', 404, 'No API is listening on this path'),
  notReady: define('not_ready', 503, 'Gateway not ready: its configuration is still loading'),
  apiInactive: define('api_inactive', 404, 'This API is not active'),
  authMissing: define('auth_missing', 401, 'Authorization field missing'),
  accessDenied: define('access_denied', 403, 'Access to this API has been disallowed'),
  keyRateLimited: define('key_rate_limited', 429, 'Rate Limit Exceeded'),
  apiRateLimited: define('api_rate_limited', 429, 'API Rate Limit Exceeded'),
  streamRateLimitWaitExceeded: define('stream_rate_limit_wait_exceeded', 429, 'Upstream rate limit exceeded'),
  quotaExceeded: define('quota_exceeded', 403, 'Quota exceeded'),
  storeUnavailable: define('store_unavailable', 503, 'Rate limit store unavailable'),
  sessionStoreUnavailable: define('session_store_unavailable', 503, 'Session store unavailable'),
  bodyTooLarge: define('body_too_large', 413, 'Request body too large'),
  upstreamUnreachable: define('upstream_unreachable', 502, 'Upstream unreachable'),
  upstreamTimeout: define('upstream_timeout', 504, 'Upstream timed out'),
  badUpgrade: define('bad_upgrade', 400, 'Unsupported connection upgrade'),
  upstreamBadUpgrade: define('upstream_bad_upgrade', 502, 'Upstream switched protocols without a WebSocket handshake'),
  internal: define('internal_error', 500, 'Internal gateway error'),
  badRequest: define('bad_request', 400, 'Malformed HTTP request'),
  headersTooLarge: define('headers_too_large', 431, 'Request header fields too large'),
  tooManyHeaders: define('too_many_headers', 431, 'Too many request header fields'),
  requestTimeout: define('request_timeout', 408, 'Request not received in time'),
  badHost: define('bad_host', 400, 'An HTTP/1.1 request needs exactly one Host header'),
  badTarget: define('bad_target', 400, 'The request-target names no host, or names a user'),
  badPath: define('bad_path', 400, 'The path has a dot segment with parameters (such as ..;), which servers resolve differently'),
  expectationFailed: define('expectation_failed', 417, 'The only expectation served is 100-continue'),
  connectNotServed: define('connect_not_served', 501, 'CONNECT is not served: this gateway is not a forward proxy'),
} as const satisfies Record<string, GatewayError>;
