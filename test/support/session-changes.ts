import { Redis as RedisClient, type Cluster, type Redis } from 'ioredis';
import type { Logger } from '../../common/logger.ts';
import { pino } from 'pino';
import { RedisSessionStore } from '../../common/session-store.ts';
import { SessionCache } from '../../sidecar/auth/session-cache.ts';
import { reportedSessionCache, SessionChangeFeed, TrackedSessionReads, type SessionChanges } from '../../sidecar/auth/session-changes.ts';
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
 * Redis tracks (`t`: the reads' connection, or a Cluster master's report connection, which
 * tracks itself), or the one the reports go to (`P`: subscribed).
 */
export async function killReportConnection(redis: Redis, which: 'tracked' | 'subscribed' = 'tracked'): Promise<void> {
  const flag = which === 'tracked' ? 't' : 'P';
  const line = String(await redis.client('LIST')).split('\n').find((l) => new RegExp(` flags=\\S*${flag}`).test(l));
  const id = /^id=(\d+)/.exec(line ?? '')?.[1];
  if (id === undefined) throw new Error(`no connection has the flag ${flag}`);
  await redis.client('KILL', 'ID', id);
}

/**
 * A gateway's session cache on a client of its own, kept by a feed that records the keys it
 * is told of: reports of the sessions it read (`tracked reads`), of every session
 * (`broadcast`), or none.
 */
export function gatewayTold(url: string, mode: 'tracked reads' | 'broadcast' | 'none', logger: Logger) {
  const client = new RedisClient(url);
  const reads = mode === 'tracked reads' ? new TrackedSessionReads(client, logger) : undefined;
  const cache = new SessionCache(reads ?? new RedisSessionStore(client));
  const told: string[] = [];
  const listener = {
    trackingStarted: () => cache.trackingStarted(),
    trackingStopped: () => cache.trackingStopped(),
    changed: (hash: string) => {
      told.push(hash);
      cache.changed(hash);
    },
    allChanged: () => cache.allChanged(),
  };
  const feed = mode === 'none' ? undefined : new SessionChangeFeed(client, listener, logger, { reads });
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
