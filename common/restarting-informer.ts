import { STATUS_CODES } from 'node:http';
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
  /** After each failed list or watch, as its restart is planned. */
  onFailed?: () => void;
}

/** Since when the watch has failed without a good list, and its last error. */
export interface WatchFailure {
  sinceMs: number;
  error: unknown;
}

/**
 * Keeps a client-node informer running. A failed list or watch stops one for good, so
 * every failure restarts it with backoff, back to the first delay once a list succeeds and
 * its watch then stays up for the longest delay: an API-server outage delays updates, it
 * never ends them, and a watch refused right after each good list (a Role that grants list
 * but not watch) is listed again at the longest delay, not every second. The operator's caches and the
 * sidecar's config source both watch through this.
 */
export class RestartingInformer<T extends KubernetesObject> {
  readonly #informer: Informer<T>;
  readonly #options: RestartingInformerOptions;
  #failures = 0;
  #failed = false;
  #failure: WatchFailure | undefined;
  /** When the last good list came, until the next failure. */
  #listedAt: number | undefined;
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

  /** Set from a failure until the next good list: what the cache holds may be out of date since `sinceMs`. */
  failure(): WatchFailure | undefined {
    return this.#failure;
  }

  async #start(): Promise<void> {
    this.#failed = false;
    await this.#informer.start();
    if (this.#failed || this.#stopped) return;
    this.#listedAt = Date.now();
    this.#failure = undefined;
    this.#options.onListed?.();
  }

  #restartLater(error: unknown): void {
    this.#failed = true;
    if (this.#stopped) return;
    this.#failure = { sinceMs: this.#failure?.sinceMs ?? Date.now(), error };
    const { log, what, baseMs, maxMs, onFailed } = this.#options;
    if (this.#listedAt !== undefined && Date.now() - this.#listedAt >= maxMs) this.#failures = 0;
    this.#listedAt = undefined;
    const delayMs = Math.min(maxMs, baseMs * 2 ** this.#failures);
    this.#failures += 1;
    log.warn({ err: error, delayMs }, `${what} watch failed; restarting`);
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      if (!this.#stopped) void this.#start();
    }, delayMs);
    this.#timer.unref();
    onFailed?.();
  }
}

/**
 * A watch error (or any failed API call: the operator's reconciles name theirs so) in a few
 * words for a status report or a log line: the HTTP status the API server answered
 * (and its Status message, which names the user and verb refused), or the connection's error
 * code. Never the error's whole text: client-node's carries the response's headers.
 */
export function describeWatchError(error: unknown): string {
  const err = (error ?? {}) as { code?: unknown; statusCode?: unknown; body?: unknown; message?: unknown; cause?: { code?: unknown } };
  const status = typeof err.statusCode === 'number' ? err.statusCode : typeof err.code === 'number' ? err.code : undefined;
  if (status !== undefined) {
    const text = `${status} ${STATUS_CODES[status] ?? 'error'}`;
    const message = statusMessage(err.body);
    return message === undefined || message === STATUS_CODES[status] ? text : `${text}: ${message}`;
  }
  const code = typeof err.code === 'string' ? err.code : typeof err.cause?.code === 'string' ? err.cause.code : undefined;
  const message = typeof err.message === 'string' ? err.message.split('\n', 1)[0]!.slice(0, 200) : String(error);
  return code === undefined || message.includes(code) ? message : `${code} (${message})`;
}

function statusMessage(body: unknown): string | undefined {
  try {
    const status = (typeof body === 'string' ? JSON.parse(body) : body) as { message?: unknown } | null;
    return typeof status?.message === 'string' ? status.message.slice(0, 300) : undefined;
  } catch {
    return undefined;
  }
}
