import type { Cluster, Redis } from 'ioredis';
import type { Logger } from '../../common/logger.ts';
import { pino } from 'pino';
import { RedisSessionStore } from '../../common/session-store.ts';
import { createRedisClient } from '../../common/redis-url.ts';
import { SessionCache, type SessionCacheOptions } from '../../sidecar/auth/session-cache.ts';
import { sessionKeyPrefix } from '../../common/redis-keys.ts';
import { reportedSessionCache, type SessionChangeListener, type SessionChanges } from '../../sidecar/auth/session-changes.ts';
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

/** The keys a Redis server's tracking table holds (INFO stats): the sessions some gateway read and was not yet told changed. */
export async function trackedKeys(server: Redis): Promise<number> {
  return Number(/^tracking_total_keys:(\d+)/m.exec(await server.info('stats'))?.[1]);
}

/**
 * A gateway's session cache on a client of its own (`url`: one server or a Cluster), kept by
 * reports of the sessions it read (`tracked reads`, wired as the gateway wires it), of every
 * session (`broadcast`, one server only), or none; `told` records the sessions it is told
 * changed, in order.
 */
export function gatewayTold(url: string, mode: 'tracked reads' | 'broadcast' | 'none', logger: Logger, cacheOptions: SessionCacheOptions = {}) {
  const client = createRedisClient(url, {});
  let cache: SessionCache;
  let feed: SessionChanges | undefined;
  if (mode === 'tracked reads') ({ cache, changes: feed } = reportedSessionCache(client, { logger, ...cacheOptions }));
  else {
    cache = new SessionCache(new RedisSessionStore(client), cacheOptions);
    if (mode === 'broadcast') feed = broadcastReports(client as Redis, cache);
  }
  const told: string[] = [];
  const changed = cache.changed.bind(cache);
  cache.changed = (hash: string): void => {
    told.push(hash);
    changed(hash);
  };
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
