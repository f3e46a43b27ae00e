import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { Cluster, Redis } from 'ioredis';
import { gatewayHeartbeatKey } from '../../common/redis-keys.ts';
import { defaultGatewaySettings, type GatewaySettings } from '../../crds/settings.ts';
import type { StoreReporter } from './store-health.ts';
import { withTimeout } from './stores/with-timeout.ts';

export interface HeartbeatOptions {
  redis: Redis | Cluster;
  instanceId: string;
  intervalMs: number;
  now: () => number;
  reporter: StoreReporter;
  /**
   * The instance ids of the other workers of this gateway (docs/architecture.md#workers): they
   * count as live from the start. Workers start together, and each one's first beat found
   * itself alone, so each took a whole DRL limit until its next beat read the others.
   */
  siblings?: readonly string[];
}

/**
 * One beat of a gateway in the heartbeat sets of KEYS: its member renewed (the score is its
 * expiry), the expired members dropped, the key's expiry set, and each set's live members
 * returned. ARGV: the expiry, the instance id, now and the TTL (ms). Redis is given the
 * numbers as the decimal strings they came as.
 */
const beatScript = `local live = {}
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[1], ARGV[2])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[3])
  redis.call('PEXPIRE', key, ARGV[4])
  live[i] = redis.call('ZRANGEBYSCORE', key, '(' .. ARGV[3], '+inf')
end
return live`;
const beatCommand = 'gwHeartbeat';

/** The beat script as ioredis's `defineCommand` makes it: the key count first, unless the command declares it (a Cluster's, one key per call). */
interface BeatClient {
  gwHeartbeat(...args: Array<string | number>): Promise<string[][]>;
}

/**
 * The sets one script call renews, and one turn of the event loop sends. A beat used to send
 * a MULTI of four commands per API all at once: at 5,000 APIs (the admin gateway's
 * GW_APIS=*), every 2 s, it held the event loop for about 260 ms and cost half a second of
 * CPU (docs/architecture.md#performance). On a Cluster, whose keys of one call must share a
 * slot, each call renews one set.
 */
export const SETS_PER_CALL = 100;

/**
 * How long after the first read of newly served sets they are read again. Gateways that start
 * together, or load an API together (an operator's ConfigMap reaches its sidecars within
 * milliseconds), each find in their first read only those that beat before them; counting
 * fewer gateways than serve the API, each would take more than its share of a DRL limit
 * (docs/behaviour.md#algorithms).
 */
export const READ_AGAIN_MS = 250;

/**
 * Beats (about a minute) after which an API that no limit counted since covers is no longer
 * read (`GatewayHeartbeat.cover`): keys name APIs no gateway serves, and stop being used.
 */
export const UNCOVERED_BEATS = 30;

/** The promise, with a handler that keeps its failure from going unhandled until the caller awaits it. */
function handled<T>(answer: Promise<T>): Promise<T> {
  answer.catch(() => undefined);
  return answer;
}

/**
 * Sends `send(turn)` for each `SETS_PER_CALL` of `items`, one turn of the event loop each, and
 * waits for every answer. Each answer is handled from the moment it is sent: one that fails
 * before the last is sent would otherwise go unhandled, which ends a Node process. Once
 * `stillWanted` answers false, nothing more is sent and the result is undefined.
 */
async function sendInTurns<T, R>(items: readonly T[], send: (turn: readonly T[]) => Array<Promise<R>>): Promise<R[]>;
async function sendInTurns<T, R>(items: readonly T[], send: (turn: readonly T[]) => Array<Promise<R>>, stillWanted: () => boolean): Promise<R[] | undefined>;
async function sendInTurns<T, R>(items: readonly T[], send: (turn: readonly T[]) => Array<Promise<R>>, stillWanted = (): boolean => true): Promise<R[] | undefined> {
  const answers: Array<Promise<R>> = [];
  for (let at = 0; at < items.length; at += SETS_PER_CALL) {
    if (at > 0) await nextTurn();
    if (!stillWanted()) return undefined;
    for (const answer of send(items.slice(at, at + SETS_PER_CALL))) answers.push(handled(answer));
  }
  return Promise.all(answers);
}

/**
 * Each API's gateways whose heartbeat has not expired at `nowMs`, sorted: what `kubectl gw
 * status` shows. The sets are read as a beat renews them, `SETS_PER_CALL` per turn of the
 * event loop: the admin gateway serves every API.
 */
export async function liveGateways(redis: Redis | Cluster, apiIds: readonly string[], nowMs: number): Promise<Map<string, string[]>> {
  const members = await sendInTurns(apiIds, (turn) => turn.map((api) => redis.zrangebyscore(gatewayHeartbeatKey(api), `(${nowMs}`, '+inf')));
  return new Map(apiIds.map((api, i) => [api, members[i]!.sort()]));
}

/**
 * Live gateways per API for the Distributed Rate Limiter (docs/behaviour.md#algorithms): every interval this
 * gateway renews its member (score = expiry) in the set of each API it serves and reads
 * who else is live. Background only; a request never waits for it.
 */
export class GatewayHeartbeat {
  readonly #options: HeartbeatOptions;
  readonly #ttlMs: number;
  #apis: readonly string[] = [];
  #watched: readonly string[] = [];
  /** `#apis` and `#watched`, for `cover`'s look-ups. */
  #known = new Set<string>();
  /**
   * APIs the limits counted cover beyond those: a key's own grant, a Policy granting every API
   * a key may call (`cover`). Each with the beats since a limit last covered it: one no limit
   * covered for `UNCOVERED_BEATS` is read no more.
   */
  readonly #covered = new Map<string, number>();
  /** Coverage lists `cover` has looked at since the last beat (one list object per limit). */
  #coverChecked = new WeakSet<readonly string[]>();
  #live = new Map<string, ReadonlySet<string>>();
  /** This gateway and its sibling workers: live in every set it serves, whatever Redis said last. */
  readonly #group: readonly string[];
  /** Union sizes per coverage list (one list object per limit), valid until the next beat. */
  #unions = new WeakMap<readonly string[], number>();
  #timer: NodeJS.Timeout | undefined;
  /** The sets newly served or watched, until their first reads are done (`firstReadOf`). */
  readonly #unsettled = new Set<string>();
  /** Those first reads: a beat now and one `READ_AGAIN_MS` after it; the latest cycle of them. */
  #firstReads: Promise<void> | undefined;
  /** A cycle asked for while another runs: it starts when that one ends, and reads every set asked for until then. */
  #queuedReads: Promise<void> | undefined;
  /** Beats started, and the one whose reads `#live` holds: the interval's beat and a first read's may overlap. */
  #beatsStarted = 0;
  #liveFrom = 0;
  /** Counts the times this gateway left its sets (`stop`): a beat still sending then sends no more, so none renews it after. */
  #departures = 0;
  #timeoutMs = defaultGatewaySettings.redis_timeout_ms;

  constructor(options: HeartbeatOptions) {
    this.#options = options;
    // Three missed beats and a gateway no longer counts.
    this.#ttlMs = options.intervalMs * 3;
    this.#group = [options.instanceId, ...(options.siblings ?? [])];
    const { redis } = options;
    if (!(beatCommand in redis)) redis.defineCommand(beatCommand, { lua: beatScript, numberOfKeys: redis.isCluster ? 1 : undefined });
  }

  configure(settings: GatewaySettings): void {
    this.#timeoutMs = settings.redis_timeout_ms;
  }

  /**
   * `apiIds`: the APIs this gateway serves (it joins their sets). `alsoWatch`: other APIs
   * whose live gateways it needs to know, those a policy's global allowance shares with
   * an API it serves.
   */
  serve(apiIds: readonly string[], alsoWatch: readonly string[] = []): void {
    this.#apis = apiIds;
    const serving = new Set(apiIds);
    this.#watched = alsoWatch.filter((api) => !serving.has(api));
    this.#known = new Set([...apiIds, ...this.#watched]);
    for (const api of this.#known) this.#covered.delete(api);
    this.#coverChecked = new WeakSet();
    if (this.#timer) this.#readFirst();
  }

  /**
   * A limit about to be counted covers `apiIds`: those whose live gateways this one does not
   * read yet are read from now on, first at once (`firstReadOf`, as for an API newly served),
   * so the limit's split counts their gateways too. Cheap once per list object and beat.
   */
  cover(apiIds: readonly string[]): void {
    if (this.#coverChecked.has(apiIds)) return;
    this.#coverChecked.add(apiIds);
    let added = false;
    for (const api of apiIds) {
      if (this.#known.has(api)) continue;
      if (!this.#covered.has(api)) added = true;
      this.#covered.set(api, 0);
    }
    if (added && this.#timer) this.#readFirst();
  }

  start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => void this.beat(), this.#options.intervalMs).unref();
    // Back in the sets at once, whether or not there is one to read first.
    if (!this.#readFirst()) void this.beat();
  }

  /**
   * The sets not read yet are read at once and again `READ_AGAIN_MS` later, and a DRL decision
   * on one of their APIs waits for both (`firstReadOf`): counted alone, or with only the
   * gateways that loaded the API a moment earlier, this gateway would take more than its share.
   * False when every set was read before. One cycle runs at a time, and one more waits for it:
   * keys first met after a start cover new APIs request after request, and a cycle each would
   * read every set again each time.
   */
  #readFirst(): boolean {
    let unread = 0;
    for (const api of [...this.#apis, ...this.#watched, ...this.#covered.keys()]) {
      if (this.#live.has(api) || this.#unsettled.has(api)) continue;
      this.#unsettled.add(api);
      unread += 1;
    }
    if (unread === 0) return false;
    if (this.#queuedReads) return true;
    const running = this.#firstReads;
    const reads = (async (): Promise<void> => {
      if (running) await running;
      this.#queuedReads = undefined;
      await this.beat();
      await sleep(READ_AGAIN_MS, undefined, { ref: false });
      if (this.#timer) await this.beat();
    })();
    if (running) this.#queuedReads = reads;
    this.#firstReads = reads;
    void reads.finally(() => {
      // A later first read covers these sets too: it reads every set served.
      if (this.#firstReads !== reads) return;
      this.#firstReads = undefined;
      this.#unsettled.clear();
    });
    return true;
  }

  /**
   * The first reads under way of the live gateways of one of `apiIds`, if any: a DRL decision
   * waits for them (each beat bounded by redis_timeout_ms) rather than count too few gateways.
   */
  firstReadOf(apiIds: readonly string[]): Promise<void> | undefined {
    const reads = this.#firstReads;
    if (reads === undefined) return undefined;
    for (const api of apiIds) if (this.#unsettled.has(api)) return reads;
    return undefined;
  }

  /** Whether first reads are under way: the request path asks `firstReadOf` only then. */
  get readingNew(): boolean {
    return this.#firstReads !== undefined;
  }

  get running(): boolean {
    return this.#timer !== undefined;
  }

  /** Leaves every set at once so the other gateways' shares grow on their next beat. */
  async stop(): Promise<void> {
    if (!this.#timer) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#departures += 1;
    const { redis, instanceId } = this.#options;
    const leave = sendInTurns(this.#apis, (turn) => turn.map((api) => redis.zrem(gatewayHeartbeatKey(api), instanceId)));
    await withTimeout(leave, this.#timeoutMs).catch((error: unknown) => this.#options.reporter.failed(error));
  }

  /** Live gateways serving any of the APIs, this one and its sibling workers included. */
  count(apiIds: readonly string[]): number {
    if (apiIds.length === 1) return Math.max(1, this.#live.get(apiIds[0]!)?.size ?? this.#group.length);
    let size = this.#unions.get(apiIds);
    if (size === undefined) {
      const union = new Set<string>(this.#group);
      for (const api of apiIds) for (const member of this.#live.get(api) ?? []) union.add(member);
      size = union.size;
      this.#unions.set(apiIds, size);
    }
    return size;
  }

  /**
   * Renews this gateway in the set of every API it serves and reads who is live there and in
   * the watched sets: `SETS_PER_CALL` sets per script call and per turn of the event loop,
   * each call bounded by redis_timeout_ms. Until every call has answered, the last counts stay.
   */
  async beat(): Promise<void> {
    const { redis, instanceId, now } = this.#options;
    const nowMs = now();
    const apis = this.#apis;
    const perCall = redis.isCluster ? 1 : SETS_PER_CALL;
    const args = [String(nowMs + this.#ttlMs), instanceId, String(nowMs), String(this.#ttlMs)];
    const bounded = <T>(call: Promise<T>): Promise<T> => withTimeout(call, this.#timeoutMs);
    for (const [api, beats] of this.#covered) {
      if (beats >= UNCOVERED_BEATS) this.#covered.delete(api);
      else this.#covered.set(api, beats + 1);
    }
    // Each list still in use marks its APIs covered again at its next count.
    this.#coverChecked = new WeakSet();
    const watched = [...this.#watched, ...this.#covered.keys()].map((api) =>
      handled(bounded(redis.zrangebyscore(gatewayHeartbeatKey(api), `(${nowMs}`, '+inf')).then((members) => [api, new Set(members)] as const)),
    );
    const client = redis as unknown as BeatClient;
    const renew = (served: readonly string[]): Promise<Array<readonly [string, ReadonlySet<string>]>> => {
      const keys = served.map(gatewayHeartbeatKey);
      const reply = redis.isCluster ? client.gwHeartbeat(...keys, ...args) : client.gwHeartbeat(keys.length, ...keys, ...args);
      return bounded(reply).then((live) => served.map((api, k) => [api, new Set([...this.#group, ...(live[k] ?? [])])] as const));
    };
    const departures = this.#departures;
    const started = ++this.#beatsStarted;
    try {
      const renewed = await sendInTurns(
        apis,
        (turn) => Array.from({ length: Math.ceil(turn.length / perCall) }, (_, i) => renew(turn.slice(i * perCall, (i + 1) * perCall))),
        () => this.#departures === departures,
      );
      if (!renewed) return;
      const live = new Map([...(await Promise.all(watched)), ...renewed.flat()]);
      // A beat with no set to renew or read asked Redis nothing.
      if (apis.length > 0 || watched.length > 0) this.#options.reporter.succeeded();
      // A beat that started before the one whose counts are in force read fewer sets, or older members.
      if (started < this.#liveFrom) return;
      this.#liveFrom = started;
      this.#live = live;
      this.#unions = new WeakMap();
    } catch (error) {
      // The last known counts stay in force until Redis answers again.
      this.#options.reporter.failed(error);
    }
  }
}
