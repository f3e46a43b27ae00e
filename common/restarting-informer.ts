import type { Informer, KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from './logger.ts';

export interface RestartingInformerOptions {
  log: Logger;
  /** Names the watch in the log line of a failure. */
  what: string;
  /** The first restart's delay; each failure in a row doubles it, up to maxMs. */
  baseMs: number;
  maxMs: number;
  /** After each good list: the cache now holds what the API server holds. */
  onListed?: () => void;
}

/**
 * Keeps a client-node informer running. A failed list or watch stops one for good, so
 * every failure restarts it with backoff, back to the first delay once a list succeeds:
 * an API-server outage delays updates, it never ends them. The operator's caches and the
 * sidecar's config source both watch through this.
 */
export class RestartingInformer<T extends KubernetesObject> {
  readonly #informer: Informer<T>;
  readonly #options: RestartingInformerOptions;
  #failures = 0;
  #failed = false;
  #stopped = true;
  #timer: NodeJS.Timeout | undefined;

  constructor(informer: Informer<T>, options: RestartingInformerOptions) {
    this.#informer = informer;
    this.#options = options;
    informer.on('error', (error: unknown) => this.#restartLater(error));
  }

  /** Resolves once the first list is done, good or failed (a failed one is retried in the background). */
  async start(): Promise<void> {
    this.#stopped = false;
    await this.#start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#informer.stop();
  }

  async #start(): Promise<void> {
    this.#failed = false;
    await this.#informer.start();
    if (this.#failed || this.#stopped) return;
    this.#failures = 0;
    this.#options.onListed?.();
  }

  #restartLater(error: unknown): void {
    this.#failed = true;
    if (this.#stopped) return;
    const { log, what, baseMs, maxMs } = this.#options;
    const delayMs = Math.min(maxMs, baseMs * 2 ** this.#failures);
    this.#failures += 1;
    log.warn({ err: error, delayMs }, `${what} watch failed; restarting`);
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      if (!this.#stopped) void this.#start();
    }, delayMs);
    this.#timer.unref();
  }
}
