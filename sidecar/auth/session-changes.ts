import calculateSlot from 'cluster-key-slot';
import { Redis, ReplyError, type ChainableCommander, type Cluster } from 'ioredis';
import type { Gauge } from 'prom-client';
import { ConnectionLostError, ConnectionWatch } from '../../common/redis-connection.ts';
import { ErrorLogGate, reconnectBackoff, handleConnectionErrors } from '../../common/redis-url.ts';
import { sessionKey, sessionKeyPrefix } from '../../common/redis-keys.ts';
import type { Logger } from '../../common/logger.ts';
import type { SessionReads } from '../../common/session-store.ts';
import { SESSION_TTL_MS, SessionCache, type SessionCacheOptions } from './session-cache.ts';
import { withTimeout } from '../limits/stores/with-timeout.ts';

/** The channel a RESP2 connection's own tracking reports on, when it redirects to itself. */
const INVALIDATIONS = '__redis__:invalidate';

/**
 * Redis answered no: to a setup command (CLIENT not allowed by an ACL, a Redis older than 6),
 * asking again at once will not change it; to a read (a Cluster's MOVED or ASK, the slot on its
 * way to another master; CLUSTERDOWN while a master is lost), the connection and its tracking
 * are as they were. Anything else (a command timed out on a busy start, a connection lost) is
 * tried again on a new connection.
 */
const refusedByRedis = (err: unknown): boolean => err instanceof (ReplyError as typeof Error);

/** What learns of the changes: the session cache (sidecar/auth/session-cache.ts). */
export interface SessionChangeListener {
  trackingStarted(): void;
  trackingStopped(): void;
  changed(keyHash: string): void;
  /** The read under way for `keyHash` is answered without tracking: nothing says the session changed. */
  untracked(keyHash: string): void;
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
  /** Rations the connection's error lines; shared with the reads' connection on the same server. */
  errorLog?: ErrorLogGate;
}

/**
 * How long after Redis refused the setup it is asked again: a user's ACL fixed meanwhile (say,
 * `+client|caching` added) turns tracking on without a restart. A refused try costs a few
 * commands.
 */
export const REFUSED_SETUP_RETRY_MS = 10_000;

/** A connection's error lines while its server stays away: one per 5 s. */
const connectionErrorLog = (): ErrorLogGate => new ErrorLogGate(5_000);

/**
 * A session read on the gateway's own client, refused at once while its connection is down:
 * queued, it would hold the request for the whole `redis_timeout_ms` first.
 */
function readUnlessLost(client: Redis | Cluster, connection: ConnectionWatch, key: string): Promise<string | null> {
  const lost = connection.lost();
  return lost === undefined ? client.get(key) : Promise.reject(new ConnectionLostError('session read', lost));
}

/**
 * The reply to `next`, sent right after CLIENT CACHING YES: in OPTIN mode Redis tracks the keys
 * of the one command after it, and a pipeline lets nothing in between.
 */
async function afterCachingYes(reader: Redis, next: (pipeline: ChainableCommander) => ChainableCommander): Promise<unknown> {
  const replies = (await next(reader.pipeline().client('CACHING', 'YES')).exec()) ?? [];
  for (const [err] of replies) if (err) throw err;
  return replies[1]?.[1];
}

/** ioredis's answer to a command that passed its `commandTimeout`. */
const timedOut = (err: unknown): boolean => err instanceof Error && err.message === 'Command timed out';

/** A Cluster master's answer while the Cluster has lost a master (and no replica has taken over yet). */
const clusterDown = (err: unknown): boolean => refusedByRedis(err) && (err as Error).message.startsWith('CLUSTERDOWN');

/**
 * The session cache's reads on one Redis server (or a Sentinel set, or one Cluster master), on
 * a connection of their own that the feed turns tracking on for (CLIENT TRACKING in OPTIN mode,
 * reports redirected to the feed's connection). Redis then remembers which gateway read which
 * session and reports each change to those gateways only: a session write costs Redis one
 * report per gateway that holds the session, not one per gateway of the fleet
 * (docs/architecture.md#sessions). Only the sessions found are tracked: Redis keeps a tracked
 * key in its table until the key is written, which a key that does not exist may never be, so
 * tracking every read let a flood of made-up keys fill Redis's memory. A key not seen before is
 * read untracked first, and read again tracked only when its session is there; a missing one is
 * cached for the short TTL. Only this connection's reads are tracked, so the limit scripts on
 * the main connection add nothing to Redis's table. While tracking is off, reads go through the
 * gateway's own client.
 */
export class TrackedSessionReads implements SessionReads {
  /** The gateway's client (a Cluster's, for a master's reads): reads while untracked, or refused here. */
  readonly #main: Redis | Cluster;
  readonly #mainConnection: ConnectionWatch;
  /** The connection whose reads are tracked: the feed runs CLIENT TRACKING on it. */
  readonly reader: Redis;
  /** Set by the feed: true only while this connection's tracking reports to a live feed. */
  tracked = false;
  /** Set by the feed: a read on the tracked connection failed, so reports may be lost. */
  onLost: () => void = () => undefined;
  /** Set by the feed: this session's read was refused here (MOVED, ASK, CLUSTERDOWN) and is answered untracked. */
  onUntracked: (keyHash: string) => void = () => undefined;

  /** `server` is the one Redis (or Cluster master) whose reads are tracked; `main` reads otherwise. */
  constructor(server: Redis, logger: Logger, main: Redis | Cluster = server, errorLog = connectionErrorLog()) {
    this.#main = main;
    this.#mainConnection = new ConnectionWatch(main);
    this.reader = server.duplicate({ protocol: 2, enableOfflineQueue: false, lazyConnect: false, retryStrategy: reconnectBackoff });
    handleConnectionErrors(this.reader, logger, errorLog);
  }

  getJson(keyHash: string, seen = false): Promise<string | null> {
    const key = sessionKey(keyHash);
    if (!this.tracked) return readUnlessLost(this.#main, this.#mainConnection, key);
    const read = seen ? this.#trackedGet(key) : this.reader.get(key).then((json) => {
      if (json !== null) return this.#trackedGet(key);
      this.onUntracked(keyHash);
      return null;
    });
    return read.catch((err: unknown) => {
      // The cache learns that this answer is untracked before it takes it, and then keeps it only briefly.
      if (refusedByRedis(err)) this.onUntracked(keyHash);
      else this.onLost();
      // A stalled server answers the main connection no sooner: read again there, the request
      // would wait a second timeout for its session before its limits' (README.md#gateway-settings).
      // A Cluster that is down refuses it there too, after the cluster client's retries.
      if (timedOut(err) || clusterDown(err)) throw err;
      return readUnlessLost(this.#main, this.#mainConnection, key);
    });
  }

  async #trackedGet(key: string): Promise<string | null> {
    return (await afterCachingYes(this.reader, (pipeline) => pipeline.get(key))) as string | null;
  }
}

/**
 * The session cache's reads on a Redis Cluster: each read goes to the tracked reads of the
 * master that holds its slot (in the cluster client's slot map), so each master tells a gateway
 * of the changes to the sessions it read there, as one server does. ClusterSessionChangeFeed
 * keeps a master's reads here while that master has a feed. A slot whose master has none yet (the
 * slot map refreshed before the feed did) is read through the cluster client, untracked; so is a
 * session whose master answers MOVED or ASK (its slot moving elsewhere): it is then kept only
 * briefly, and its next read goes where the refreshed slot map says.
 */
export class ClusterSessionReads implements SessionReads {
  readonly #cluster: Cluster;
  readonly #connection: ConnectionWatch;
  /** Each master's tracked reads, by the `host:port` the slot map names the master by. */
  readonly byMaster = new Map<string, TrackedSessionReads>();
  /** Set by the feed: a session was read untracked. */
  onUntracked: (keyHash: string) => void = () => undefined;

  /** `redis_timeout_ms` as it is now: a read's bound. */
  readonly #timeoutMs: () => number;

  constructor(cluster: Cluster, timeoutMs: () => number) {
    this.#cluster = cluster;
    this.#connection = new ConnectionWatch(cluster);
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Bounded by `redis_timeout_ms` here, not by the nodes' command timeout alone: the Cluster
   * client sends a read again on CLUSTERDOWN and on redirections, which held a request for
   * seconds while a master was down.
   */
  getJson(keyHash: string, seen = false): Promise<string | null> {
    const timeoutMs = this.#timeoutMs();
    return withTimeout(this.#read(keyHash, seen), timeoutMs, () => new Error(`session read did not answer within ${timeoutMs} ms`));
  }

  #read(keyHash: string, seen: boolean): Promise<string | null> {
    const key = sessionKey(keyHash);
    const master = this.#cluster.slots[calculateSlot(key)]?.[0];
    const reads = master === undefined ? undefined : this.byMaster.get(master);
    if (reads !== undefined) return reads.getJson(keyHash, seen);
    return readUnlessLost(this.#cluster, this.#connection, key).then((json) => {
      this.onUntracked(keyHash);
      return json;
    });
  }
}

/**
 * Redis's reports of changes to stored sessions (server-assisted client-side caching: CLIENT
 * TRACKING), handed to the session cache, so a session can stay cached until it changes
 * (docs/architecture.md#sessions).
 *
 * One connection of its own, speaking RESP2, subscribed to the reports' channel: ioredis drops
 * RESP3's invalidation pushes, and in RESP2 Redis sends the reports as Pub/Sub messages to a
 * subscribed redirect. It turns tracking on for the connection of the cache's `reads`,
 * redirected here, and is told of the sessions this gateway read.
 *
 * Tracking lasts as long as both connections: when one closes, or stops answering the
 * heartbeat, the cache is told that reports may be lost (it forgets every entry), and tracking
 * starts again once both are open, before the cache is told it is back. Where Redis refuses it
 * (CLIENT not allowed by an ACL, a Redis older than 6), the cache keeps its short TTL, a
 * warning says why, and Redis is asked again every REFUSED_SETUP_RETRY_MS. A setup that fails
 * otherwise (a command timed out while the gateway or Redis was busy) is tried again on a new
 * connection.
 */
export class SessionChangeFeed implements SessionChanges {
  readonly #connection: Redis;
  readonly #listener: SessionChangeListener;
  readonly #logger: Logger;
  readonly #tracked: Gauge | undefined;
  readonly #heartbeat: NodeJS.Timeout;
  readonly #reads: TrackedSessionReads;
  #tracking = false;
  /** Counts the connection's openings, so a setup that outlived its connection does not count. */
  #opened = 0;
  /** The same for the reads' connection. */
  #readerOpened = 0;
  /**
   * This connection's id once it listens for reports, for the reads' tracking to redirect to;
   * a new object per opening (a close clears it), so holding the same one means the same opening.
   */
  #redirect: { id: number } | undefined;
  #closed = false;
  /** The next try of a setup Redis refused. */
  #retry: NodeJS.Timeout | undefined;
  /** Whether the refusal was told since tracking last ran: it is logged once, not at every try. */
  #refusalLogged = false;

  /** `redis` is the server (or Cluster master) that `reads` reads from. */
  constructor(redis: Redis, reads: TrackedSessionReads, listener: SessionChangeListener, logger: Logger, options: SessionChangeFeedOptions = {}) {
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
    handleConnectionErrors(this.#connection, logger, options.errorLog ?? connectionErrorLog());
    this.#connection.on('ready', () => void this.#track(++this.#opened));
    this.#connection.on('close', () => {
      this.#redirect = undefined;
      this.#stop();
    });
    this.#connection.on('messageBuffer', (channel: Buffer, message: Buffer | Buffer[] | null) => {
      if (channel.toString() === INVALIDATIONS) this.#report(message);
    });
    this.#reads = reads;
    reads.reader.on('ready', () => {
      this.#readerOpened += 1;
      void this.#trackReads();
    });
    reads.reader.on('close', () => this.#stop());
    reads.onLost = () => this.#readerLost();
    reads.onUntracked = (keyHash) => listener.untracked(keyHash);
    this.#heartbeat = setInterval(() => this.#ping(), options.heartbeatMs ?? 1_000).unref();
  }

  /** True while every change is reported. */
  get tracking(): boolean {
    return this.#tracking;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#heartbeat);
    clearTimeout(this.#retry);
    this.#stop();
    await Promise.all([this.#connection, this.#reads.reader].map((c) => c.quit().catch(() => c.disconnect())));
  }

  async #track(opening: number): Promise<void> {
    const connection = this.#connection;
    let id: number;
    try {
      id = Number(await connection.client('ID'));
      await connection.subscribe(INVALIDATIONS);
    } catch (err) {
      const again = (): void => {
        if (opening === this.#opened) void this.#track(opening);
      };
      if (opening === this.#opened && !this.#closed) this.#failed(connection, err, again);
      return;
    }
    if (opening !== this.#opened || this.#closed || connection.status !== 'ready') return;
    this.#redirect = { id };
    await this.#trackReads();
  }

  /** Turns tracking on for the reads' connection, reporting here, once both connections are open. */
  async #trackReads(): Promise<void> {
    const redirect = this.#redirect;
    const reader = this.#reads.reader;
    if (redirect === undefined || this.#tracking || this.#closed || reader.status !== 'ready') return;
    const readerOpening = this.#readerOpened;
    try {
      // OFF first: a connection whose redirect was an earlier feed connection is pointed at this one.
      await reader.client('TRACKING', 'OFF');
      await reader.client('TRACKING', 'ON', 'REDIRECT', String(redirect.id), 'OPTIN');
      // Each found session's read says CLIENT CACHING YES: a user whose ACL refuses it (one made
      // from README.md's list before tracking was opt-in) is found out here, once, not at every read.
      await afterCachingYes(reader, (pipeline) => pipeline.ping());
    } catch (err) {
      if (readerOpening === this.#readerOpened && !this.#closed) this.#failed(reader, err, () => void this.#trackReads());
      return;
    }
    if (this.#unchangedSince(redirect, readerOpening)) this.#start();
  }

  /** Neither connection closed or opened again since a setup for `redirect` and the reads' opening began. */
  #unchangedSince(redirect: { id: number }, readerOpening: number): boolean {
    const open = this.#connection.status === 'ready' && this.#reads.reader.status === 'ready';
    return open && !this.#closed && redirect === this.#redirect && readerOpening === this.#readerOpened;
  }

  /**
   * A setup command on `connection` failed: refused by Redis, `again` after a while on the same
   * connection; otherwise tried again on a new connection.
   */
  #failed(connection: Redis, err: unknown, again: () => void): void {
    if (refusedByRedis(err)) {
      if (!this.#refusalLogged) {
        this.#refusalLogged = true;
        this.#logger.warn({ err }, `Redis does not report session changes; sessions are read again every ${SESSION_TTL_MS} ms, and Redis is asked again every ${REFUSED_SETUP_RETRY_MS / 1000} s`);
      }
      clearTimeout(this.#retry);
      this.#retry = setTimeout(again, REFUSED_SETUP_RETRY_MS).unref();
      return;
    }
    this.#logger.warn({ err }, 'could not turn on reports of session changes yet; trying again on a new connection');
    connection.disconnect(true);
  }

  #start(): void {
    if (this.#tracking) return;
    this.#tracking = true;
    this.#refusalLogged = false;
    this.#reads.tracked = true;
    this.#tracked?.set(1);
    this.#listener.trackingStarted();
    this.#logger.info('Redis reports session changes; sessions stay cached until they change');
  }

  #stop(): void {
    if (!this.#tracking) return;
    this.#tracking = false;
    this.#reads.tracked = false;
    this.#tracked?.set(0);
    this.#listener.trackingStopped();
    if (!this.#closed) this.#logger.warn(`session changes are no longer reported; sessions are read again every ${SESSION_TTL_MS} ms until they are`);
  }

  /** A read on the tracked connection failed: its tracking may be gone with it, so it is opened again. */
  #readerLost(): void {
    this.#stop();
    if (!this.#closed) this.#reads.reader.disconnect(true);
  }

  #ping(): void {
    if (!this.#tracking) return;
    // A connection that died without a close (a cable pulled) would otherwise keep the cache trusting it.
    this.#connection.ping().catch(() => {
      this.#stop();
      if (!this.#closed) this.#connection.disconnect(true);
    });
    this.#reads.reader.ping().catch(() => this.#readerLost());
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
 * The reports of a Redis Cluster: each master reports the changes of the sessions read from it,
 * so there is a SessionChangeFeed, with its tracked reads, per master, and changes are tracked
 * while every master's feed tracks. The masters are taken again at each of the client's slot
 * refreshes: a feed for a master that left is closed, and a master that joined (or a replica
 * promoted) gets one, whose start leaves the cache untracked (it forgets every entry) until it
 * tracks too, since keys may have moved.
 */
export class ClusterSessionChangeFeed implements SessionChanges {
  readonly #cluster: Cluster;
  readonly #listener: SessionChangeListener;
  readonly #logger: Logger;
  readonly #options: SessionChangeFeedOptions;
  readonly #reads: ClusterSessionReads;
  readonly #feeds = new Map<string, SessionChangeFeed>();
  readonly #errorLogs = new Map<string, ErrorLogGate>();
  /** What each master's feed reports: changes go straight through, its tracking counts towards all of them. */
  readonly #fromNode: SessionChangeListener;
  readonly #sync = (): void => this.#syncMasters();
  #tracking = false;
  #closed = false;

  /** `reads` are the cache's reads on `cluster`: the feed keeps each master's tracked reads in them. */
  constructor(cluster: Cluster, reads: ClusterSessionReads, listener: SessionChangeListener, logger: Logger, options: SessionChangeFeedOptions = {}) {
    this.#cluster = cluster;
    this.#reads = reads;
    reads.onUntracked = (keyHash) => listener.untracked(keyHash);
    this.#listener = listener;
    this.#logger = logger;
    this.#options = options;
    options.tracked?.set(0);
    this.#fromNode = {
      trackingStarted: () => this.#update(),
      trackingStopped: () => this.#update(),
      changed: (keyHash) => listener.changed(keyHash),
      untracked: (keyHash) => listener.untracked(keyHash),
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
    this.#reads.byMaster.clear();
    this.#update();
    await Promise.all(feeds.map((feed) => feed.close()));
  }

  #syncMasters(): void {
    if (this.#closed) return;
    const masters = new Map(this.#cluster.nodes('master').map((node) => [`${node.options.host}:${node.options.port}`, node]));
    for (const [node, feed] of this.#feeds) {
      if (masters.has(node)) continue;
      this.#feeds.delete(node);
      this.#reads.byMaster.delete(node);
      void feed.close();
    }
    for (const [node, redis] of masters) {
      if (this.#feeds.has(node)) continue;
      const logger = this.#logger.child({ node });
      const errorLog = this.#errorLogOf(node);
      const reads = new TrackedSessionReads(redis, logger, this.#cluster, errorLog);
      this.#reads.byMaster.set(node, reads);
      this.#feeds.set(node, new SessionChangeFeed(redis, reads, this.#fromNode, logger, { heartbeatMs: this.#options.heartbeatMs, errorLog }));
    }
    this.#update();
  }

  /**
   * A master's error lines outlive its feed: while it is down, the client drops it and takes it
   * back at each slot refresh, and each new feed would log its first error at once. A gate whose
   * interval has passed is forgotten, as a new one would do the same.
   */
  #errorLogOf(node: string): ErrorLogGate {
    for (const [name, gate] of this.#errorLogs) if (gate.idle) this.#errorLogs.delete(name);
    let gate = this.#errorLogs.get(node);
    if (gate === undefined) {
      gate = connectionErrorLog();
      this.#errorLogs.set(node, gate);
    }
    return gate;
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

export interface ReportedSessionCacheOptions extends SessionCacheOptions {
  logger: Logger;
  /** `redis_timeout_ms` as it is now, which bounds a read on a Cluster (default 250). */
  readTimeoutMs?: () => number;
  /** 1 while changes are tracked (gw_session_changes_tracked). */
  tracked?: Gauge;
  heartbeatMs?: number;
}

/**
 * A gateway's session cache on `redis`, kept by Redis's reports of the changes to the sessions
 * this gateway read: from the one server, the Sentinel set's master, or each Cluster master
 * (docs/architecture.md#sessions).
 */
export function reportedSessionCache(redis: Redis | Cluster, { logger, tracked, heartbeatMs, readTimeoutMs = () => 250, ...cacheOptions }: ReportedSessionCacheOptions): { cache: SessionCache; changes: SessionChanges } {
  if (redis instanceof Redis) {
    const reads = new TrackedSessionReads(redis, logger);
    const cache = new SessionCache(reads, cacheOptions);
    return { cache, changes: new SessionChangeFeed(redis, reads, cache, logger, { tracked, heartbeatMs }) };
  }
  const reads = new ClusterSessionReads(redis, readTimeoutMs);
  const cache = new SessionCache(reads, cacheOptions);
  return { cache, changes: new ClusterSessionChangeFeed(redis, reads, cache, logger, { tracked, heartbeatMs }) };
}
