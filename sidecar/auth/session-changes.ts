import type { Cluster, Redis } from 'ioredis';
import type { Gauge } from 'prom-client';
import { reconnectBackoff, reportConnectionErrors } from '../../common/redis-url.ts';
import { sessionKeyPrefix } from '../../common/redis-keys.ts';
import type { Logger } from '../../common/logger.ts';
import { SESSION_TTL_MS } from './session-cache.ts';

/** The channel a RESP2 connection's own tracking reports on, when it redirects to itself. */
const INVALIDATIONS = '__redis__:invalidate';

/** What learns of the changes: the session cache (sidecar/auth/session-cache.ts). */
export interface SessionChangeListener {
  trackingStarted(): void;
  trackingStopped(): void;
  changed(keyHash: string): void;
  allChanged(): void;
}

/** A source of the reports, running until closed. */
export interface SessionChanges {
  /** True while every change is reported. */
  readonly tracking: boolean;
  close(): Promise<void>;
}

export interface SessionChangeFeedOptions {
  /** How often the report connection is pinged; one that does not answer is opened again. */
  heartbeatMs?: number;
  /** 1 while changes are tracked, 0 otherwise. */
  tracked?: Gauge;
}

/**
 * Redis's reports of every change to a stored session (server-assisted client-side caching:
 * CLIENT TRACKING in broadcast mode on the session prefix), handed to the session cache, so a
 * session can stay cached until it changes (docs/architecture.md#sessions).
 *
 * One connection of its own, speaking RESP2: it turns tracking on with itself as the redirect
 * and subscribes to the reports' channel. ioredis drops RESP3's invalidation pushes, and in
 * RESP2 Redis sends the reports as Pub/Sub messages to a subscribed redirect. Broadcast mode
 * reports every change under the prefix, whoever read it, so the server keeps no table of what
 * this sidecar read, and the data connections need no tracking of their own.
 *
 * Tracking lasts as long as the connection: when it closes, or stops answering the heartbeat,
 * the cache is told that reports may be lost (it forgets every entry), and tracking starts
 * again, on the connection opened next, before the cache is told it is back. Where Redis
 * refuses it (CLIENT not allowed by an ACL, a Redis older than 6), the cache keeps its short
 * TTL and a warning says why.
 */
export class SessionChangeFeed implements SessionChanges {
  readonly #connection: Redis;
  readonly #listener: SessionChangeListener;
  readonly #logger: Logger;
  readonly #tracked: Gauge | undefined;
  readonly #heartbeat: NodeJS.Timeout;
  #tracking = false;
  /** Counts the connection's openings, so a setup that outlived its connection does not count. */
  #opened = 0;
  #closed = false;

  constructor(redis: Redis, listener: SessionChangeListener, logger: Logger, options: SessionChangeFeedOptions = {}) {
    this.#listener = listener;
    this.#logger = logger;
    this.#tracked = options.tracked;
    this.#tracked?.set(0);
    // A command meant for one connection must not wait for the next one (a client id is per
    // connection). A Cluster's node connections never reconnect (the cluster client makes new
    // ones), so this one is told to.
    this.#connection = redis.duplicate({
      protocol: 2,
      autoResubscribe: false,
      enableOfflineQueue: false,
      enableAutoPipelining: false,
      lazyConnect: false,
      retryStrategy: reconnectBackoff,
    });
    reportConnectionErrors(this.#connection, logger, 5_000);
    this.#connection.on('ready', () => void this.#track(++this.#opened));
    this.#connection.on('close', () => this.#stop());
    this.#connection.on('messageBuffer', (channel: Buffer, message: Buffer | Buffer[] | null) => {
      if (channel.toString() === INVALIDATIONS) this.#report(message);
    });
    this.#heartbeat = setInterval(() => this.#ping(), options.heartbeatMs ?? 1_000).unref();
  }

  /** True while every change is reported. */
  get tracking(): boolean {
    return this.#tracking;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#heartbeat);
    this.#stop();
    await this.#connection.quit().catch(() => this.#connection.disconnect());
  }

  async #track(opening: number): Promise<void> {
    const connection = this.#connection;
    try {
      const id = await connection.client('ID');
      await connection.client('TRACKING', 'ON', 'REDIRECT', String(id), 'BCAST', 'PREFIX', sessionKeyPrefix);
      await connection.subscribe(INVALIDATIONS);
    } catch (err) {
      if (opening === this.#opened && !this.#closed) {
        this.#logger.warn({ err }, `Redis does not report session changes; sessions are read again every ${SESSION_TTL_MS} ms`);
      }
      return;
    }
    if (opening !== this.#opened || this.#closed || connection.status !== 'ready') return;
    this.#tracking = true;
    this.#tracked?.set(1);
    this.#listener.trackingStarted();
    this.#logger.info('Redis reports session changes; sessions stay cached until they change');
  }

  #stop(): void {
    if (!this.#tracking) return;
    this.#tracking = false;
    this.#tracked?.set(0);
    this.#listener.trackingStopped();
    if (!this.#closed) this.#logger.warn(`session changes are no longer reported; sessions are read again every ${SESSION_TTL_MS} ms until they are`);
  }

  #ping(): void {
    if (!this.#tracking) return;
    // A connection that died without a close (a cable pulled) would otherwise keep the cache trusting it.
    this.#connection.ping().catch(() => {
      this.#stop();
      if (!this.#closed) this.#connection.disconnect(true);
    });
  }

  /** A report: the changed keys (one or several), or null when the whole database was flushed. */
  #report(message: Buffer | Buffer[] | null): void {
    if (message === null) {
      this.#listener.allChanged();
      return;
    }
    for (const key of Array.isArray(message) ? message : [message]) {
      const name = key.toString();
      if (name.startsWith(sessionKeyPrefix)) this.#listener.changed(name.slice(sessionKeyPrefix.length));
    }
  }
}

/**
 * The reports of a Redis Cluster: each master reports the changes of the keys it holds, so there
 * is a SessionChangeFeed per master, and changes are tracked while every master's feed tracks.
 * The masters are taken again at each of the client's slot refreshes: a feed for a master that
 * left is closed, and a master that joined (or a replica promoted) gets one, whose start leaves
 * the cache untracked (it forgets every entry) until it tracks too, since keys may have moved.
 */
export class ClusterSessionChangeFeed implements SessionChanges {
  readonly #cluster: Cluster;
  readonly #listener: SessionChangeListener;
  readonly #logger: Logger;
  readonly #options: SessionChangeFeedOptions;
  readonly #feeds = new Map<string, SessionChangeFeed>();
  /** What each master's feed reports: changes go straight through, its tracking counts towards all of them. */
  readonly #fromNode: SessionChangeListener;
  readonly #sync = (): void => this.#syncMasters();
  #tracking = false;
  #closed = false;

  constructor(cluster: Cluster, listener: SessionChangeListener, logger: Logger, options: SessionChangeFeedOptions = {}) {
    this.#cluster = cluster;
    this.#listener = listener;
    this.#logger = logger;
    this.#options = options;
    options.tracked?.set(0);
    this.#fromNode = {
      trackingStarted: () => this.#update(),
      trackingStopped: () => this.#update(),
      changed: (keyHash) => listener.changed(keyHash),
      allChanged: () => listener.allChanged(),
    };
    cluster.on('refresh', this.#sync);
    cluster.on('-node', this.#sync);
    this.#syncMasters();
  }

  get tracking(): boolean {
    return this.#tracking;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#cluster.off('refresh', this.#sync);
    this.#cluster.off('-node', this.#sync);
    const feeds = [...this.#feeds.values()];
    this.#feeds.clear();
    this.#update();
    await Promise.all(feeds.map((feed) => feed.close()));
  }

  #syncMasters(): void {
    if (this.#closed) return;
    const masters = new Map(this.#cluster.nodes('master').map((node) => [`${node.options.host}:${node.options.port}`, node]));
    for (const [node, feed] of this.#feeds) {
      if (masters.has(node)) continue;
      this.#feeds.delete(node);
      void feed.close();
    }
    for (const [node, redis] of masters) {
      if (this.#feeds.has(node)) continue;
      const { heartbeatMs } = this.#options;
      this.#feeds.set(node, new SessionChangeFeed(redis, this.#fromNode, this.#logger.child({ node }), { heartbeatMs }));
    }
    this.#update();
  }

  #update(): void {
    let all = this.#feeds.size > 0;
    for (const feed of this.#feeds.values()) all &&= feed.tracking;
    if (all === this.#tracking) return;
    this.#tracking = all;
    this.#options.tracked?.set(all ? 1 : 0);
    if (all) this.#listener.trackingStarted();
    else this.#listener.trackingStopped();
  }
}
