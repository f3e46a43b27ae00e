import type { Logger } from '../../common/logger.ts';
import { describeWatchError } from '../../common/restarting-informer.ts';
import { ApiException } from '@kubernetes/client-node';
import { isNamespaceTerminating } from '../../common/kube.ts';
import type { KindName } from '../../crds/kinds.ts';
import type { OperatorMetrics } from '../runtime/metrics.ts';
import { WorkQueue } from '../runtime/work-queue.ts';
import { LeaseLapsedError, requestKey, requestOf, TerminalError, type Reconciler, type Result } from './reconciler.ts';
import type { OwnWrites } from './own-writes.ts';
import type { Cause, Watch } from './watch.ts';

/** A kind's reconciler and what it watches. */
export interface KindController extends Reconciler {
  readonly kind: KindName;
  readonly watches: readonly Watch[];
}

export interface ControllerOptions {
  concurrency: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** A reconcile running longer is abandoned and retried, so stopping (leadership lost) never waits longer. */
  timeoutMs: number;
  /** The operator's own writes: a change that is one of them does not bring an object back. */
  ownWrites?: OwnWrites;
  /** Whether this process may act as the leader now (LeaderElector#holdsLease); always, without election. */
  mayReconcile?: () => boolean;
}

/** How often a spread resync queues its next slice. */
const RESYNC_SLICE_MS = 100;
/** When an object put off because the lease lapsed is tried again (by then a renewal has said whether this process leads). */
const LEASE_LAPSED_RETRY_MS = 500;

export class ReconcileTimeoutError extends Error {
  override readonly name = 'ReconcileTimeoutError';
}

/**
 * A reconciler behind its work queue: its watches feed the queue while it runs (only
 * the leader runs controllers), each reconcile is timed, limited in time, counted and
 * logged; errors retry with backoff unless terminal, and a result's requeueAfterMs
 * brings the object back after that delay.
 */
export class Controller {
  readonly kind: KindName;
  readonly #reconciler: KindController;
  readonly #queue: WorkQueue<Cause>;
  readonly #timeoutMs: number;
  readonly #mayReconcile: () => boolean;
  readonly #metrics: OperatorMetrics;
  readonly #log: Logger;
  /** When each item last reconciled successfully: the resync skips what is fresh. */
  readonly #lastSuccess = new Map<string, number>();
  /** The failure last logged at warn for each item retrying: the same again is logged at debug. */
  readonly #lastFailure = new Map<string, string>();
  #running = false;
  /** The timer that queues the next slice of a spread resync. */
  #resyncSlices: NodeJS.Timeout | undefined;

  constructor(reconciler: KindController, options: ControllerOptions, metrics: OperatorMetrics, log: Logger) {
    this.kind = reconciler.kind;
    this.#reconciler = reconciler;
    this.#timeoutMs = options.timeoutMs;
    this.#mayReconcile = options.mayReconcile ?? (() => true);
    this.#metrics = metrics;
    this.#log = log.child({ controller: reconciler.kind });
    const { ownWrites } = options;
    this.#queue = new WorkQueue<Cause>((key) => this.#run(key), {
      ...options,
      ownChange: ownWrites ? (cause) => ownWrites.take(cause.kind, cause.object) : undefined,
    });
    for (const watch of reconciler.watches) watch.subscribe((request, cause) => this.#running && this.#queue.add(requestKey(request), cause));
  }

  /** Starts reconciling: everything the watches cover is queued once. */
  start(): void {
    this.#running = true;
    this.#queue.start();
    for (const watch of this.#reconciler.watches) for (const request of watch.resyncRequests()) this.#queue.add(requestKey(request));
  }

  /** Stops taking work and waits for the running reconciles (each bounded by the time limit). */
  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#resyncSlices);
    await this.#queue.stop();
  }

  /** Items waiting, retrying or running (the queue-depth metric). */
  depth(): number {
    return this.#queue.depth();
  }

  /**
   * Resync: queue the items not reconciled within `maxAgeMs`, in even slices over `spreadMs`.
   * Re-running what just ran corrects nothing. While items wait for a worker (a cold start
   * with thousands of objects) the resync waits for a later tick: it would put objects
   * reconciled a moment ago in the way of objects never reconciled yet. Items no longer
   * listed are forgotten. Spread, 10,000 Keys are not 10,000 reconciles (and Redis reads) at
   * once: the operator bench measured that burst at about 40 MiB of RSS the heap grew for it.
   * A pass still being fed when the next one starts gives way to it (its rest is stale still).
   */
  resync(maxAgeMs: number, spreadMs = 0): void {
    if (this.#queue.waiting() > 0) {
      this.#log.debug({ waiting: this.#queue.waiting() }, 'resync postponed: the queue has a backlog');
      return;
    }
    const now = Date.now();
    const listed = new Set(this.#reconciler.watches.flatMap((watch) => watch.resyncRequests().map(requestKey)));
    for (const key of this.#lastSuccess.keys()) if (!listed.has(key)) this.#lastSuccess.delete(key);
    for (const key of this.#lastFailure.keys()) if (!listed.has(key)) this.#lastFailure.delete(key);
    const stale = [...listed].filter((key) => now - (this.#lastSuccess.get(key) ?? 0) >= maxAgeMs);
    clearTimeout(this.#resyncSlices);
    const slices = Math.max(1, Math.floor(spreadMs / RESYNC_SLICE_MS));
    const perSlice = Math.ceil(stale.length / slices);
    let next = 0;
    const queueSlice = (): void => {
      if (!this.#running) return;
      for (const key of stale.slice(next, next + perSlice)) this.#queue.add(key);
      next += perSlice;
      if (next < stale.length) this.#resyncSlices = setTimeout(queueSlice, RESYNC_SLICE_MS).unref();
    };
    queueSlice();
  }

  async #run(key: string): Promise<void> {
    // A leader that stalled past its lease resumes with overdue resyncs and a cache that may
    // still hold what was deleted meanwhile: it acts on none of it before it has renewed.
    if (!this.#mayReconcile()) return this.#putOff(key);
    const end = this.#metrics.reconcileSeconds.startTimer({ kind: this.kind });
    try {
      const result = await this.#withTimeLimit(key);
      this.#metrics.reconciles.inc({ kind: this.kind, result: 'success' });
      this.#lastSuccess.set(key, Date.now());
      this.#lastFailure.delete(key);
      if (result?.requeueAfterMs !== undefined) this.#queue.addAfter(key, result.requeueAfterMs);
    } catch (error) {
      if (error instanceof LeaseLapsedError) return this.#putOff(key);
      this.#metrics.reconciles.inc({ kind: this.kind, result: 'error' });
      if (error instanceof TerminalError) {
        // The object's input is wrong and its status says why: the user's to fix, no operator
        // fault, so a warning with the reason, not an error with a stack. A resync checks it
        // again; the same reason again is logged at debug, as a retry's is (#logRetry).
        const again = this.#lastFailure.get(key) === error.message;
        this.#lastFailure.set(key, error.message);
        if (again) this.#log.debug({ object: key, reason: error.message }, 'reconcile failed again the same way');
        else this.#log.warn({ object: key, reason: error.message }, 'reconcile failed; not retried until the object changes');
        return;
      }
      if (isNamespaceTerminating(error)) {
        this.#log.debug({ object: key, reason: describeWatchError(error) }, 'reconcile stopped: the namespace is being deleted');
        return;
      }
      this.#logRetry(key, error);
      throw error;
    } finally {
      end();
    }
  }

  /**
   * A failure is logged at warn with its stack once; its retries failing the same way are
   * logged at debug. With Redis away, 500 Keys retrying with backoff logged 3,000 stacks in
   * 25 s, which buried the one line that said Redis was away. An API server's refusal is told
   * by its code and Status message, without a stack: client-node's message carries the
   * response's headers (audit-id, date), new on every retry, so a 422 had been a new warning
   * with its headers each time.
   */
  #logRetry(key: string, error: unknown): void {
    const message = describeWatchError(error);
    if (this.#lastFailure.get(key) === message) {
      this.#log.debug({ object: key, reason: message }, 'reconcile failed again; will retry');
      return;
    }
    this.#lastFailure.set(key, message);
    if (error instanceof ApiException) this.#log.warn({ object: key, reason: message }, 'reconcile failed; will retry');
    else this.#log.warn({ object: key, err: error }, 'reconcile failed; will retry');
  }

  #putOff(key: string): void {
    this.#log.debug({ object: key }, 'reconcile put off: the lease is not known to be held');
    this.#queue.addAfter(key, LEASE_LAPSED_RETRY_MS);
  }

  async #withTimeLimit(key: string): Promise<Result | void> {
    const abort = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = new ReconcileTimeoutError(`reconcile took longer than ${this.#timeoutMs} ms`);
        abort.abort(error);
        reject(error);
      }, this.#timeoutMs);
    });
    try {
      return await Promise.race([this.#reconciler.reconcile(requestOf(key), abort.signal), expired]);
    } finally {
      clearTimeout(timer);
    }
  }
}
