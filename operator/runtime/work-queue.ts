/**
 * A small controller work queue: an item queued several times before it is processed
 * runs once (dedup by key), an item is never processed by two workers at once (a key
 * re-added while running is run again afterwards, unless every change that re-added it
 * was that very run's own write), failures retry with exponential backoff per item, and
 * at most `concurrency` items run at a time.
 */
export interface WorkQueueOptions<C> {
  concurrency: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /**
   * Whether the change `cause` was written by the run that was going on when it came: the
   * watch event of a write often arrives before the write's own answer, while its run still
   * goes on (operator/kit/own-writes.ts). Asked once the run has ended.
   */
  ownChange?: (cause: C) => boolean;
}

export type WorkHandler = (key: string) => Promise<void>;

export class WorkQueue<C = never> {
  readonly #handler: WorkHandler;
  readonly #options: WorkQueueOptions<C>;
  /** Insertion-ordered set: the items waiting for a worker. */
  readonly #ready = new Set<string>();
  readonly #running = new Set<string>();
  /** Items added again while running, with the changes that added them (null: one came without a cause). */
  readonly #dirty = new Map<string, C[] | null>();
  readonly #failures = new Map<string, number>();
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #idleWaiters: Array<() => void> = [];
  #stopped = true;

  constructor(handler: WorkHandler, options: WorkQueueOptions<C>) {
    this.#handler = handler;
    this.#options = options;
  }

  start(): void {
    this.#stopped = false;
    this.#pump();
  }

  /** Stops taking work, cancels pending retries, and waits for the running items to end. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
    this.#ready.clear();
    this.#dirty.clear();
    if (this.#running.size > 0) await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Queues an item; `cause` is the change that asked for it, if known. */
  add(key: string, cause?: C): void {
    if (this.#running.has(key)) {
      const causes = this.#dirty.get(key);
      this.#dirty.set(key, cause === undefined || causes === null ? null : [...(causes ?? []), cause]);
      return;
    }
    const timer = this.#timers.get(key);
    if (timer) {
      clearTimeout(timer);
      this.#timers.delete(key);
    }
    this.#ready.add(key);
    this.#pump();
  }

  addAfter(key: string, delayMs: number): void {
    if (this.#stopped || this.#timers.has(key)) return;
    const timer = setTimeout(() => {
      this.#timers.delete(key);
      this.add(key);
    }, delayMs);
    timer.unref();
    this.#timers.set(key, timer);
  }

  /** Items waiting or running (the queue-depth metric). */
  depth(): number {
    return this.#ready.size + this.#running.size + this.#timers.size;
  }

  /** Items waiting for a worker now (not running, not waiting out a retry delay). */
  waiting(): number {
    return this.#ready.size;
  }

  /** Current retry delay of an item: base × 2^failures, capped. */
  backoffMs(failures: number): number {
    return Math.min(this.#options.maxDelayMs, this.#options.baseDelayMs * 2 ** Math.max(0, failures - 1));
  }

  #onlyOwnChanges(causes: C[] | null): boolean {
    const ownChange = this.#options.ownChange;
    return causes !== null && ownChange !== undefined && causes.every((cause) => ownChange(cause));
  }

  #pump(): void {
    while (!this.#stopped && this.#running.size < this.#options.concurrency && this.#ready.size > 0) {
      const key = this.#ready.values().next().value as string;
      this.#ready.delete(key);
      this.#running.add(key);
      void this.#run(key);
    }
  }

  async #run(key: string): Promise<void> {
    try {
      await this.#handler(key);
      this.#failures.delete(key);
    } catch {
      const failures = (this.#failures.get(key) ?? 0) + 1;
      this.#failures.set(key, failures);
      this.addAfter(key, this.backoffMs(failures));
    } finally {
      this.#running.delete(key);
      const causes = this.#dirty.get(key);
      this.#dirty.delete(key);
      if (causes !== undefined && !this.#stopped && !this.#onlyOwnChanges(causes)) this.add(key);
      if (this.#running.size === 0) this.#idleWaiters.splice(0).forEach((resolve) => resolve());
      this.#pump();
    }
  }
}
