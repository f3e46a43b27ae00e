import type { Logger } from '../../common/logger.ts';
import type { LimitMetrics } from './metrics.ts';

/**
 * Redis trouble is counted every time but logged once per burst: one line when it
 * starts, one when Redis answers again. Only the message is logged, never the command
 * (its keys are hashed, but nothing is gained by printing them).
 */
export class StoreHealth {
  readonly #logger: Logger;
  readonly #metrics: LimitMetrics;
  #failing = false;

  constructor(logger: Logger, metrics: LimitMetrics) {
    this.#logger = logger;
    this.#metrics = metrics;
  }

  get failing(): boolean {
    return this.#failing;
  }

  failed(error: unknown, failureMode: string): void {
    this.#metrics.redisErrors.inc();
    if (this.#failing) return;
    this.#failing = true;
    this.#logger.error({ err: error, failureMode }, 'rate-limit store unreachable');
  }

  succeeded(): void {
    if (!this.#failing) return;
    this.#failing = false;
    this.#logger.info('rate-limit store reachable again');
  }
}
