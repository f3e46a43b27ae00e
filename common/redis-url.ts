import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from './logger.ts';

/**
 * GW_REDIS_URL in its three topologies, the ones the Helm chart renders:
 *   redis://[user:password@]host:port[/db]   (rediss:// for TLS) — one server
 *   redis+sentinel://[:password@]host:port,host:port/<master>[/db]   (rediss+sentinel://);
 *     the password is that of the Redis servers, the sentinels themselves take none
 *   redis+cluster://[:password@]host:port,host:port   (rediss+cluster://)
 * Sentinel and Cluster have no URL form of their own in ioredis, hence these schemes.
 */
export type RedisTarget =
  | { mode: 'standalone'; url: string }
  | { mode: 'sentinel'; sentinels: Array<{ host: string; port: number }>; name: string; password?: string; db: number; tls: boolean }
  | { mode: 'cluster'; nodes: Array<{ host: string; port: number }>; password?: string; tls: boolean };

export class RedisUrlError extends Error {
  readonly code = 'invalid_redis_url';
}

const MULTI_HOST = /^(rediss?)\+(sentinel|cluster):\/\/(?:([^@/]*)@)?([^/]+)(?:\/(.*))?$/;

function parseHosts(list: string, defaultPort: number): Array<{ host: string; port: number }> {
  return list.split(',').map((entry) => {
    const match = /^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(entry.trim());
    const port = Number(match?.[2] ?? defaultPort);
    if (!match?.[1] || port < 1 || port > 65535) throw new RedisUrlError(`invalid host:port "${entry}" in GW_REDIS_URL`);
    return { host: match[1].replace(/^\[|\]$/g, ''), port };
  });
}

function parsePassword(auth: string | undefined): string | undefined {
  if (!auth) return undefined;
  const colon = auth.indexOf(':');
  const password = decodeURIComponent(colon >= 0 ? auth.slice(colon + 1) : auth);
  return password === '' ? undefined : password;
}

/**
 * A one-server URL as ioredis will read it, checked here: ioredis's own parse error repeats
 * the URL, password included, and a database path that is no number was sent to Redis as
 * such, which refused it and left the client on database 0.
 */
function checkStandalone(url: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new RedisUrlError('GW_REDIS_URL is not a valid URL: redis://[user:password@]host:port[/db], with the port from 1 to 65535');
  }
  if (parsed.port === '0') throw new RedisUrlError('the port of GW_REDIS_URL must be from 1 to 65535');
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    throw new RedisUrlError('the user or password of GW_REDIS_URL has a malformed %-escape');
  }
  if (!/^(\/(\d{1,9})?)?$/.test(parsed.pathname)) throw new RedisUrlError('the path of a redis:// URL is the database number, such as /0');
}

/** Parses GW_REDIS_URL; the message of a bad URL never repeats the URL (it may hold a password). */
export function parseRedisUrl(url: string): RedisTarget {
  if (/^rediss?:\/\//.test(url)) {
    checkStandalone(url);
    return { mode: 'standalone', url };
  }
  const match = MULTI_HOST.exec(url);
  if (!match) throw new RedisUrlError('GW_REDIS_URL must start with redis://, rediss://, redis+sentinel:// or redis+cluster://');
  const [, scheme, mode, auth, hosts = '', path = ''] = match;
  const tls = scheme === 'rediss';
  const password = parsePassword(auth);
  if (mode === 'cluster') {
    if (path !== '') throw new RedisUrlError('a redis+cluster:// URL takes no path (Redis Cluster has only database 0)');
    return { mode: 'cluster', nodes: parseHosts(hosts, 6379), password, tls };
  }
  const [name = '', db = '0', ...rest] = path.split('/');
  if (name === '' || rest.length > 0 || !/^\d+$/.test(db)) throw new RedisUrlError('a redis+sentinel:// URL needs the path /<master name>[/<db>]');
  return { mode: 'sentinel', sentinels: parseHosts(hosts, 26379), name: decodeURIComponent(name), password, db: Number(db), tls };
}

/**
 * A client for GW_REDIS_URL with the caller's options. For a cluster they apply to each
 * node connection, and the ones ioredis keeps at cluster level are lifted there too.
 */
export function createRedisClient(url: string, options: RedisOptions): Redis | Cluster {
  const target = parseRedisUrl(url);
  const tls = (on: boolean): RedisOptions => (on ? { tls: {} } : {});
  switch (target.mode) {
    case 'standalone':
      return new Redis(url, options);
    case 'sentinel':
      // failoverDetector: leave for the new master on the sentinels' +switch-master,
      // instead of writing to the old one until the sentinel demotes it (about 10 s).
      return new Redis({
        ...options,
        ...tls(target.tls),
        sentinels: target.sentinels,
        name: target.name,
        db: target.db,
        password: target.password,
        failoverDetector: true,
      });
    case 'cluster':
      return new Cluster(target.nodes, {
        enableAutoPipelining: options.enableAutoPipelining,
        // Without it an FCALL went into the Cluster's auto-pipeline, which sent it without its
        // command name: Redis read the function's name as the command and refused it.
        autoPipeliningIgnoredCommands: options.autoPipeliningIgnoredCommands,
        enableOfflineQueue: options.enableOfflineQueue,
        lazyConnect: options.lazyConnect,
        redisOptions: { ...options, ...tls(target.tls), password: target.password },
      });
  }
}

/**
 * The wait before a sidecar's Redis connection tries again: doubling from 200 ms to 1 s,
 * forever. While it is down, a gateway failing open counts nothing, so the wait after Redis
 * is back is a time without limits: at most 1 s, for one connection attempt a second per
 * gateway meanwhile (a refused TCP connection costs Redis's host next to nothing).
 */
export const reconnectBackoff = (attempt: number): number => Math.min(100 * 2 ** Math.min(attempt, 5), 1000);

/**
 * At most one line per `everyMs` for the connection errors of the connections that share it.
 * A connection made anew while Redis is away (a Cluster master's session feed, made again at
 * each of the client's slot refreshes) shares the gate of the one it replaces: with a gate of
 * its own it would log its first error at once, every time.
 */
export class ErrorLogGate {
  readonly #everyMs: number;
  readonly #now: () => number;
  #lastLogged = Number.NEGATIVE_INFINITY;

  constructor(everyMs: number, now: () => number = Date.now) {
    this.#everyMs = everyMs;
    this.#now = now;
  }

  /** Whether a line may be logged now; one that may takes this interval's turn. */
  take(): boolean {
    const now = this.#now();
    if (now - this.#lastLogged < this.#everyMs) return false;
    this.#lastLogged = now;
    return true;
  }

  /** Its interval has passed: a new gate would do the same. */
  get idle(): boolean {
    return this.#now() - this.#lastLogged >= this.#everyMs;
  }
}

/**
 * Connection errors logged as `gate` lets them while Redis stays away (not once per
 * reconnect attempt), counted by `onError`, and never thrown into the process: ioredis
 * keeps reconnecting, and the caller's own timeouts decide what a command does meanwhile.
 *
 * A SELECT that Redis refuses (GW_REDIS_URL names a database the server does not have) is
 * one of them: ioredis only reports it and goes on, on database 0, where counts and sessions
 * would land among another user's. The connection is dropped and tried again with its
 * backoff instead, so nothing is written until the database exists.
 *
 * Returns the last error since the connection was last ready, for /readyz to name.
 */
export function handleConnectionErrors(redis: Redis | Cluster, log: Logger, gate: ErrorLogGate, onError?: () => void): () => Error | undefined {
  let last: Error | undefined;
  redis.on('ready', () => (last = undefined));
  redis.on('error', (raw: Error) => {
    const err = refusedDatabase(raw) ?? raw;
    if (err !== raw) redis.disconnect(true);
    last = err;
    onError?.();
    if (gate.take()) log.warn({ err }, 'redis unavailable');
  });
  return () => last;
}

/** ioredis names the command a reply error answered. */
interface CommandReplyError extends Error {
  command?: { name?: string; args?: unknown[] };
}

function refusedDatabase(err: CommandReplyError): Error | undefined {
  if (err.command?.name !== 'select') return undefined;
  return new Error(`Redis refused database ${String(err.command.args?.[0])} of GW_REDIS_URL (${err.message}): the server has fewer databases`);
}
