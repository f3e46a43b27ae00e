/**
 * Calls between the primary and its workers over the IPC channel node:cluster opens
 * (docs/architecture.md#workers). A call is answered by one reply carrying a result or an
 * error message; a notice expects none. Messages are tagged `gw`: node:cluster sends its own
 * on the same channel.
 */
import type { Readiness } from '../../common/health.ts';
import type { CompiledApi } from '../../crds/compiled.ts';
import type { SlotMove, SlotRelease, SlotRequest, SlotReservation, StreamResource } from '../limits/stream-limiter.ts';
import type { WorkerMetrics } from './metrics.ts';

/** The environment variable the primary gives each worker its index in. */
export const WORKER_INDEX_ENV = 'GW_WORKER_INDEX';
/** The environment variable the primary gives each worker the number of workers in. */
export const WORKER_COUNT_ENV = 'GW_WORKER_COUNT';

/**
 * How long a call run on every other worker may take, both where the primary waits for each
 * worker and where the asking worker waits for the primary: a reload re-reads config (in a
 * cluster, lists ConfigMaps), which takes a while on a large one.
 */
export const OTHERS_TIMEOUT_MS = 30_000;

/**
 * How long a worker waits for the primary to give a stream rate-limit slot before its own
 * limiter decides: the primary answers at once unless its event loop is stuck.
 */
export const STREAM_SLOT_TIMEOUT_MS = 1000;

/**
 * How long a worker starting again waits for the APIs the others retain: each answers from
 * memory. Past it the worker starts without them.
 */
export const RETAINED_TIMEOUT_MS = 5000;

/** How long the primary waits for each worker's metrics on a scrape before it fails the scrape (a sum without a worker would read as counters reset). */
export const METRICS_TIMEOUT_MS = 5000;

/** What the primary asks of a worker. */
export type WorkerMethods = {
  /** Answered straight from the event loop: the worker's loop turns (the primary's liveness asks). */
  alive: { params: undefined; result: undefined };
  readiness: { params: undefined; result: Readiness };
  /** Reload this worker's config; `release`: first release what deletes retained (GET /gw/reload), else only re-read (SIGHUP). */
  reload: { params: { release: boolean }; result: undefined };
  /** Keep serving an API whose definition was deleted from the folder until the next reload. */
  retain: { params: { apiId: string }; result: undefined };
  /** The compiled APIs this worker serves though their definitions were deleted (retained until the next reload). */
  retainedApis: { params: undefined; result: CompiledApi[] };
  /** This worker's metrics, for the primary's /metrics. */
  metrics: { params: undefined; result: WorkerMetrics };
};

/**
 * What a worker asks of the primary: the same call made on every other worker, the APIs the
 * others retain (a worker started again), or a slot of a stream rate-limit resource.
 */
export type PrimaryMethods = {
  others: { params: OthersCall; result: undefined };
  retainedApis: { params: undefined; result: CompiledApi[] };
  /** Slots of stream rate-limit resources, given in the order asked. */
  streamSlots: { params: SlotRequest[]; result: SlotReservation[] };
};

type RunOnOthers = Exclude<keyof WorkerMethods, 'alive' | 'retainedApis' | 'metrics'>;
export type OthersCall = { [M in RunOnOthers]: { method: M; params: WorkerMethods[M]['params'] } }[RunOnOthers];

/** One-way notices, either direction. */
export interface Notices {
  /** A smoothed limit moved to `value`: the primary's gauge gw_smoothing_allowance holds the last move of any worker. */
  allowance: { labels: { kind: string; namespace: string; name: string }; value: number };
  /**
   * A worker's side of the channel is open: it has loaded its code and answers calls from now
   * on, though it may still be warming up or loading its config.
   */
  listening: undefined;
  /** A worker started and serves. */
  started: undefined;
  /** Drain and exit. */
  stop: undefined;
  /** A worker's caller left before the stream rate-limit slot the primary gave it, or its request was refused. */
  streamRelease: SlotRelease;
  /** The primary brought a worker's caller's slot forward: a caller ahead of it gave one back, or the resource changed. */
  streamMoved: SlotMove;
  /** A worker loaded a config: the stream rate-limit resources of its APIs. */
  streamResources: readonly StreamResource[];
}

type Methods = Record<string, { params: unknown; result: unknown }>;
type Handlers<M extends Methods> = { [K in keyof M]: (params: M[K]['params']) => Promise<M[K]['result']> | M[K]['result'] };
type NoticeHandlers = { [K in keyof Notices]?: (payload: Notices[K]) => void };

type Message =
  | { gw: 'call'; id: number; method: string; params: unknown }
  | { gw: 'reply'; id: number; result?: unknown; error?: string }
  | { gw: 'notice'; name: string; payload: unknown };

const isMessage = (value: unknown): value is Message => typeof value === 'object' && value !== null && typeof (value as { gw?: unknown }).gw === 'string';

/** The most timed-out calls an IpcPeer still waits on for a late answer. */
const MAX_LATE_CALLS = 1_000;

/** What a call failed with on the other side, or its timeout. */
export class IpcCallError extends Error {
  readonly code = 'ipc_call_failed';
}

/**
 * One end of the channel: answers the calls `handlers` serve, makes calls of `Remote`
 * methods, and sends and receives notices. `send` is process.send in a worker and
 * worker.send in the primary.
 */
export class IpcPeer<Local extends Methods, Remote extends Methods> {
  readonly #send: (message: Message) => void;
  readonly #handlers: Handlers<Local>;
  readonly #notices: NoticeHandlers;
  readonly #pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void; timer: NodeJS.Timeout }>();
  /** Calls that timed out whose answer, should it still come, is handed to a handler (oldest first, bounded). */
  readonly #late = new Map<number, (result: unknown) => void>();
  #nextId = 0;

  constructor(send: (message: Message) => void, handlers: Handlers<Local>, notices: NoticeHandlers = {}) {
    this.#send = send;
    this.#handlers = handlers;
    this.#notices = notices;
  }

  /**
   * Calls `method` on the other end. `late` gets the result of a call answered after its
   * timeout, for what the other end did on a call nobody waits for any more (slots it gave).
   */
  call<K extends keyof Remote & string>(method: K, params: Remote[K]['params'], timeoutMs: number, late?: (result: Remote[K]['result']) => void): Promise<Remote[K]['result']> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        if (late !== undefined) this.#awaitLate(id, late as (result: unknown) => void);
        reject(new IpcCallError(`${method}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject, timer });
      try {
        this.#send({ gw: 'call', id, method, params });
      } catch (error) {
        this.#settle(id, { error: `${method}: ${(error as Error).message}` });
      }
    });
  }

  notify<K extends keyof Notices>(name: K, payload: Notices[K]): void {
    try {
      this.#send({ gw: 'notice', name, payload });
    } catch {
      // The other end is gone; a notice is not worth more than the channel.
    }
  }

  /** The channel closed: every call still waiting fails now instead of at its timeout. */
  close(reason: string): void {
    for (const id of [...this.#pending.keys()]) this.#settle(id, { error: reason });
    this.#late.clear();
  }

  #awaitLate(id: number, late: (result: unknown) => void): void {
    this.#late.set(id, late);
    // An end that never answers leaves no more than this many waiting.
    if (this.#late.size > MAX_LATE_CALLS) this.#late.delete(this.#late.keys().next().value!);
  }

  /** Feed every message of the channel here; messages that are not gw's are ignored. */
  receive(message: unknown): void {
    if (!isMessage(message)) return;
    if (message.gw === 'reply') this.#settle(message.id, message);
    else if (message.gw === 'notice') (this.#notices[message.name as keyof Notices] as ((payload: unknown) => void) | undefined)?.(message.payload);
    else void this.#answer(message.id, message.method, message.params);
  }

  async #answer(id: number, method: string, params: unknown): Promise<void> {
    const handler = this.#handlers[method] as ((params: unknown) => unknown) | undefined;
    let reply: Message;
    try {
      if (handler === undefined) throw new Error(`no method ${method}`);
      reply = { gw: 'reply', id, result: await handler(params) };
    } catch (error) {
      reply = { gw: 'reply', id, error: error instanceof Error ? error.message : String(error) };
    }
    try {
      this.#send(reply);
    } catch {
      // The caller is gone and will time out or be closed.
    }
  }

  #settle(id: number, reply: { result?: unknown; error?: string }): void {
    const pending = this.#pending.get(id);
    if (pending === undefined) {
      const late = this.#late.get(id);
      this.#late.delete(id);
      if (late !== undefined && reply.error === undefined) late(reply.result);
      return;
    }
    this.#pending.delete(id);
    clearTimeout(pending.timer);
    if (reply.error !== undefined) pending.reject(new IpcCallError(reply.error));
    else pending.resolve(reply.result);
  }
}
