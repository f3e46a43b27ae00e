/**
 * Errors raised by the rate-limit engine, each with a stable code and the HTTP status
 * the gateway renders it with.
 */
export class StreamRateLimitTimeoutError extends Error {
  readonly code = 'stream_rate_limit_timeout';
  readonly status = 429;

  constructor(label: string, maxWaitMs: number) {
    super(`stream rate limit "${label}": no slot within ${maxWaitMs} ms`);
    this.name = 'StreamRateLimitTimeoutError';
  }
}

/** A store call that outlived `redis_timeout_ms`; handled by the engine's failure mode. */
export class StoreTimeoutError extends Error {
  readonly code = 'store_timeout';
  readonly status = 503;

  constructor(timeoutMs: number) {
    super(`rate-limit store did not answer within ${timeoutMs} ms`);
    this.name = 'StoreTimeoutError';
  }
}
