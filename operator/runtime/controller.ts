import type { Logger } from '../../common/logger.ts';
import { errorMessage } from './informer-set.ts';
import type { OperatorMetrics } from './metrics.ts';
import { WorkQueue } from './work-queue.ts';

export interface Reconciler {
  readonly kind: string;
  reconcile(key: string): Promise<void>;
}

export interface ControllerOptions {
  concurrency: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

/** A reconciler behind its work queue, with its metrics and failure logging. */
export class Controller {
  readonly kind: string;
  readonly queue: WorkQueue;
  /** When each item last reconciled successfully: the resync skips what is fresh. */
  readonly #lastSuccess = new Map<string, number>();

  constructor(reconciler: Reconciler, options: ControllerOptions, metrics: OperatorMetrics, log: Logger) {
    this.kind = reconciler.kind;
    const kindLog = log.child({ controller: reconciler.kind });
    this.queue = new WorkQueue(
      async (key) => {
        const end = metrics.reconcileSeconds.startTimer({ kind: reconciler.kind });
        try {
          await reconciler.reconcile(key);
        } finally {
          end();
        }
      },
      options,
      {
        onResult: (key, result, error) => {
          metrics.reconciles.inc({ kind: reconciler.kind, result });
          if (result === 'success') this.#lastSuccess.set(key, Date.now());
          if (result === 'error') kindLog.warn({ object: key, err: errorMessage(error) }, 'reconcile failed; will retry');
        },
      },
    );
  }

  /**
   * Resync: queue the items not reconciled within `maxAgeMs`. Re-running what just ran
   * corrects nothing, and under a backlog (a cold start with thousands of objects) it
   * would multiply the work. Items no longer listed are forgotten.
   */
  resync(keys: string[], maxAgeMs: number): void {
    const now = Date.now();
    const listed = new Set(keys);
    for (const key of this.#lastSuccess.keys()) if (!listed.has(key)) this.#lastSuccess.delete(key);
    for (const key of listed) if (now - (this.#lastSuccess.get(key) ?? 0) >= maxAgeMs) this.queue.add(key);
  }
}
