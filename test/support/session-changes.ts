import type { Cluster, Redis } from 'ioredis';
import { RedisSessionStore } from '../../common/session-store.ts';
import { SessionCache } from '../../sidecar/auth/session-cache.ts';
import type { SessionChanges } from '../../sidecar/auth/session-changes.ts';
import { waitFor } from './wait-for.ts';

/**
 * Runs `body` with a session cache on `redis` that `feedFor`'s reports keep, once they are
 * tracked; then closes the feed and the client. Untracked entries live 20 ms and tracked ones a
 * minute, so a change the cache shows within seconds was reported (docs/architecture.md#sessions).
 */
export async function withReportedSessions<R extends Redis | Cluster>(
  redis: R,
  feedFor: (redis: R, cache: SessionCache) => SessionChanges,
  body: (parts: { store: RedisSessionStore; cache: SessionCache; feed: SessionChanges }) => Promise<void>,
): Promise<void> {
  const store = new RedisSessionStore(redis);
  const cache = new SessionCache(store, { ttlMs: 20, size: 1_000, trackedTtlMs: 60_000 });
  const feed = feedFor(redis, cache);
  try {
    await waitFor('session changes tracked', async () => feed.tracking, 10_000, 50);
    await body({ store, cache, feed });
  } finally {
    await feed.close();
    redis.disconnect();
  }
}

/** Kills the connection a gateway is told of session changes on: the one with tracking on (CLIENT LIST flag `t`). */
export async function killReportConnection(redis: Redis): Promise<void> {
  const line = String(await redis.client('LIST')).split('\n').find((l) => / flags=\S*t/.test(l));
  const id = /^id=(\d+)/.exec(line ?? '')?.[1];
  if (id === undefined) throw new Error('no connection has tracking on');
  await redis.client('KILL', 'ID', id);
}
