import type { Cluster, Redis } from 'ioredis';
import type { Counter } from 'prom-client';
import type { Logger } from '../../common/logger.ts';
import { sessionKeyPrefix } from '../../common/redis-keys.ts';
import type { SessionStore } from '../../common/session-store.ts';
import type { CacheIndex } from '../kit/cache-index.ts';
import type { Source } from '../kit/watch.ts';
import type { GwObject } from '../runtime/gw-object.ts';

type Key = GwObject<'Key'>;

export interface OrphanSessionDeps {
  redis: Redis | Cluster;
  keys: Source<Key>;
  keysByHash: CacheIndex<Key>;
  /** Whether the Key cache has listed every watched namespace: before that, every session would look orphaned. */
  synced: () => boolean;
  /** Removes only while this operator leads (operator/runtime/leader-election.ts). */
  sessions: SessionStore;
  /** The namespaces the operator watches; empty: all. A session of another is another operator's. */
  watchNamespaces: readonly string[];
  removed: Counter;
  log: Logger;
}

/**
 * Sessions whose Key is gone without its finalizer having run (the finalizer patched away by
 * hand, or the Key removed while no operator ran its finalizer) would go on letting their raw
 * key in. A pass over every session in Redis finds those the operator wrote (they carry the
 * Key's uid) for a Key of a watched namespace that no cached Key is (by uid) or names (by hash),
 * and removes each one found so in two passes in a row: a Key's session is written before its
 * status says the hash, and a cache may lag a moment behind the API server, never a whole
 * period (README.md#the-operator-gw-operator). Sessions without a uid (create-key's, before
 * its Key exists; a standalone gateway's) and those of other namespaces are never touched.
 */
export class OrphanSessionSweeper {
  readonly #deps: OrphanSessionDeps;
  /** Session hashes found orphaned by the last pass. */
  #suspects = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #running = false;
  /** Counts the stops: a pass that outlived its leadership leaves no suspects to the next. */
  #stops = 0;

  constructor(deps: OrphanSessionDeps) {
    this.#deps = deps;
  }

  /** A pass now and every `periodMs`, until `stop`. */
  start(periodMs: number): void {
    this.stop();
    this.#timer = setInterval(() => this.#pass(), periodMs).unref();
    this.#pass();
  }

  /** No more passes; what the last found is forgotten (a new leader looks afresh). */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stops += 1;
    this.#suspects = new Set();
  }

  /** One pass, unless the last is still running (a large Redis). */
  #pass(): void {
    if (this.#running) return;
    this.#running = true;
    this.#sweep()
      .catch((err: unknown) => this.#deps.log.warn({ err }, 'could not look for sessions of deleted Keys; trying again at the next pass'))
      .finally(() => {
        this.#running = false;
      });
  }

  async #sweep(): Promise<void> {
    const { keys, keysByHash, sessions, synced, watchNamespaces } = this.#deps;
    if (!synced()) return;
    const stops = this.#stops;
    const watched = (namespace: string): boolean => watchNamespaces.length === 0 || watchNamespaces.includes(namespace);
    const cachedUids = new Set(keys.list().map((key) => key.metadata.uid));
    const suspects = new Set<string>();
    for await (const hash of this.#sessionHashes()) {
      if (keysByHash.get(hash).length > 0) continue;
      const session = await sessions.get(hash);
      if (session === null || session.key_uid === '' || !watched(session.namespace) || cachedUids.has(session.key_uid)) continue;
      if (!this.#suspects.has(hash)) {
        suspects.add(hash);
        continue;
      }
      // Looked at again right before: a Key naming the hash may have come since the pass began.
      if (keysByHash.get(hash).length > 0 || keys.get(session.namespace, session.key_id)?.metadata.uid === session.key_uid) continue;
      await sessions.delete(hash);
      this.#deps.removed.inc();
      // Not under `key`, which the logger redacts as a credential: the line would name no Key.
      this.#deps.log.warn({ object: `${session.namespace}/${session.key_id}`, uid: session.key_uid }, 'removed the session of a Key deleted without its finalizer: its key no longer works');
    }
    if (stops === this.#stops) this.#suspects = suspects;
  }

  /** The hash of every session in Redis, on every master of a Cluster, a page at a time. */
  async *#sessionHashes(): AsyncGenerator<string> {
    const { redis } = this.#deps;
    const servers = redis.isCluster ? (redis as Cluster).nodes('master') : [redis as Redis];
    for (const server of servers) {
      for await (const page of server.scanStream({ match: `${sessionKeyPrefix}*`, count: 1000 })) {
        for (const name of page as string[]) yield name.slice(sessionKeyPrefix.length);
      }
    }
  }
}
