/**
 * Errors raised by the rate-limit engine, each with a stable code and the HTTP status
 * the gateway renders it with.
 */
export class StreamRateLimitWaitError extends Error {
  readonly code = 'stream_rate_limit_wait_exceeded';
  readonly status = 429;
  /** How far away the caller's slot was. */
  readonly waitMs: number;

  constructor(label: string, maxWaitMs: number, waitMs: number) {
    super(`stream rate limit "${label}": the next slot is ${waitMs} ms away, longer than the ${maxWaitMs} ms a request may wait`);
    this.name = 'StreamRateLimitWaitError';
    this.waitMs = waitMs;
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

/**
 * The store's connection is not up, so the call is not sent: the client would hold it until it
 * reconnects and run it then, counting a request that was answered long before.
 */
export class StoreDisconnectedError extends Error {
  readonly code = 'store_disconnected';
  readonly status = 503;

  constructor(status: string) {
    super(`rate-limit store not connected (${status}); the call was not sent`);
    this.name = 'StoreDisconnectedError';
  }
}
