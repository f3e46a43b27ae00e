import type { Logger } from '../../common/logger.ts';
import type { SmoothingEvent, SmoothingEventSink } from '../limits/types.ts';
import type { SidecarMetrics } from '../metrics.ts';

/** Standalone mode: smoothing events become log lines. */
export class LogEventSink implements SmoothingEventSink {
  readonly #logger: Logger;
  readonly #metrics: SidecarMetrics;

  constructor(logger: Logger, metrics: SidecarMetrics) {
    this.#logger = logger;
    this.#metrics = metrics;
  }

  emit(event: SmoothingEvent): void {
    this.#metrics.events.inc({ reason: event.reason, result: 'logged' });
    this.#logger.info(
      {
        reason: event.reason,
        source: event.source,
        limiter: event.limiterKey,
        oldAllowance: event.oldAllowance,
        newAllowance: event.newAllowance,
      },
      `${event.reason}: allowance ${event.oldAllowance} -> ${event.newAllowance}`,
    );
  }
}
