import { Redis as RedisClient, type Cluster, type Redis } from 'ioredis';
import type { Logger } from '../../common/logger.ts';
import { pino } from 'pino';
import { RedisSessionStore } from '../../common/session-store.ts';
import { SessionCache } from '../../sidecar/auth/session-cache.ts';
import { sessionKeyPrefix } from '../../common/redis-keys.ts';
import { reportedSessionCache, SessionChangeFeed, TrackedSessionReads, type SessionChangeListener, type SessionChanges } from '../../sidecar/auth/session-changes.ts';
import { waitFor } from './wait-for.ts';

/**
 * Runs `body` with a gateway's session cache on `redis`, kept by Redis's reports as the sidecar
 * wires it (`reportedSessionCache`), once they are tracked; then closes the feed and the client.
 * Untracked entries live 20 ms and tracked ones a minute, so a change the cache shows within
 * seconds was reported (docs/architecture.md#sessions).
 */
export async function withReportedSessions(
  redis: Redis | Cluster,
  body: (parts: { store: RedisSessionStore; cache: SessionCache; feed: SessionChanges }) => Promise<void>,
): Promise<void> {
  const store = new RedisSessionStore(redis);
  const { cache, changes: feed } = reportedSessionCache(redis, { logger: pino({ level: 'silent' }), ttlMs: 20, size: 1_000, trackedTtlMs: 60_000 });
  try {
    await waitFor('session changes tracked', async () => feed.tracking, 10_000, 50);
    await body({ store, cache, feed });
  } finally {
    await feed.close();
    redis.disconnect();
  }
}

/**
 * Kills a connection a gateway learns of session changes through (CLIENT LIST flags): the one
 * Redis tracks (`t`: the reads' connection), or the one the reports go to (`P`: subscribed).
 */
export async function killReportConnection(redis: Redis, which: 'tracked' | 'subscribed' = 'tracked'): Promise<void> {
  const flag = which === 'tracked' ? 't' : 'P';
  const line = String(await redis.client('LIST')).split('\n').find((l) => new RegExp(` flags=\\S*${flag}`).test(l));
  const id = /^id=(\d+)/.exec(line ?? '')?.[1];
  if (id === undefined) throw new Error(`no connection has the flag ${flag}`);
  await redis.client('KILL', 'ID', id);
}

/**
 * What the gateways did before tracked reads, kept as the bench's baseline: one connection that
 * asks Redis for every change under the session prefix (CLIENT TRACKING in broadcast mode), so
 * every gateway is told of every session written, whoever read it.
 */
function broadcastReports(client: Redis, listener: SessionChangeListener): SessionChanges {
  const connection = client.duplicate({ protocol: 2 });
  let tracking = false;
  connection.on('messageBuffer', (_channel: Buffer, message: Buffer | Buffer[] | null) => {
    for (const key of Array.isArray(message) ? message : message === null ? [] : [message]) listener.changed(key.toString().slice(sessionKeyPrefix.length));
  });
  void (async () => {
    const id = String(await connection.client('ID'));
    await connection.client('TRACKING', 'ON', 'REDIRECT', id, 'BCAST', 'PREFIX', sessionKeyPrefix);
    await connection.subscribe('__redis__:invalidate');
    tracking = true;
    listener.trackingStarted();
  })();
  return {
    get tracking() {
      return tracking;
    },
    close: async () => {
      connection.disconnect();
    },
  };
}

/**
 * A gateway's session cache on a client of its own, kept by a feed that records the keys it
 * is told of: reports of the sessions it read (`tracked reads`, as the gateway runs), of every
 * session (`broadcast`), or none.
 */
export function gatewayTold(url: string, mode: 'tracked reads' | 'broadcast' | 'none', logger: Logger) {
  const client = new RedisClient(url);
  const reads = mode === 'tracked reads' ? new TrackedSessionReads(client, logger) : undefined;
  const cache = new SessionCache(reads ?? new RedisSessionStore(client));
  const told: string[] = [];
  const listener: SessionChangeListener = {
    trackingStarted: () => cache.trackingStarted(),
    trackingStopped: () => cache.trackingStopped(),
    changed: (hash: string) => {
      told.push(hash);
      cache.changed(hash);
    },
    allChanged: () => cache.allChanged(),
  };
  const feed = reads !== undefined ? new SessionChangeFeed(client, reads, listener, logger) : mode === 'broadcast' ? broadcastReports(client, listener) : undefined;
  return {
    cache,
    feed,
    told,
    close: async (): Promise<void> => {
      await feed?.close();
      client.disconnect();
    },
  };
}
