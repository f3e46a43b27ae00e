import type { Cluster, Redis } from 'ioredis';

/**
 * Whether a client's connection, once made, is down now. A command sent while it is down waits
 * in the client's offline queue until the connection is back or the command's timeout ends, so
 * a gateway that knows Redis is gone answers at once instead of after `redis_timeout_ms`
 * (README.md#redis). Before the first connection the queue is what holds the first commands a
 * moment, so those wait.
 */
export class ConnectionWatch {
  readonly #redis: Redis | Cluster;
  #connectedOnce: boolean;

  constructor(redis: Redis | Cluster) {
    this.#redis = redis;
    this.#connectedOnce = redis.status === 'ready';
    if (!this.#connectedOnce) redis.once('ready', () => (this.#connectedOnce = true));
  }

  /** The client's status while a connection made once is down; undefined while it is up, or before the first. */
  lost(): string | undefined {
    return this.#connectedOnce && this.#redis.status !== 'ready' ? this.#redis.status : undefined;
  }
}

/** A command not sent because its client's connection is down (ConnectionWatch). */
export class ConnectionLostError extends Error {
  constructor(what: string, status: string) {
    super(`${what}: Redis not connected (${status}); not sent`);
    this.name = 'ConnectionLostError';
  }
}
