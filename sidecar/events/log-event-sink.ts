import type { Logger } from '../../common/logger.ts';
import { TokenBucket } from '../../common/token-bucket.ts';
import type { SmoothingEvent, SmoothingEventSink } from '../limits/types.ts';
import type { SidecarMetrics } from '../metrics.ts';

/** Lines written at once, then per second: the bucket the cluster's Events take from (common/kube-events.ts). */
export const LOG_EVENT_BURST = 10;
export const LOG_EVENTS_PER_SECOND = 1;

/**
 * Standalone mode: smoothing events become log lines. Every line takes a token from a
 * bucket, as the cluster's Events do, so a storm of changes over many keys cannot flood the
 * log (docs/behaviour.md#events): an event that finds the bucket empty is counted as dropped
 * in gw_smoothing_event_writes_total, and the next line says how many went unwritten before it.
 */
export class LogEventSink implements SmoothingEventSink {
  readonly #logger: Logger;
  readonly #metrics: SidecarMetrics;
  readonly #bucket: TokenBucket;
  #suppressed = 0;

  constructor(logger: Logger, metrics: SidecarMetrics) {
    this.#logger = logger;
    this.#metrics = metrics;
    this.#bucket = new TokenBucket(LOG_EVENT_BURST, LOG_EVENTS_PER_SECOND);
  }

  emit(event: SmoothingEvent): void {
    if (!this.#bucket.take()) {
      this.#suppressed += 1;
      this.#metrics.events.inc({ reason: event.reason, result: 'dropped' });
      return;
    }
    this.#metrics.events.inc({ reason: event.reason, result: 'logged' });
    const suppressed = this.#suppressed;
    this.#suppressed = 0;
    this.#logger.info(
      {
        reason: event.reason,
        source: event.source,
        limiter: event.limiterKey,
        oldAllowance: event.oldAllowance,
        newAllowance: event.newAllowance,
        ...(suppressed > 0 ? { suppressed } : {}),
      },
      `${event.reason}: allowance ${event.oldAllowance} -> ${event.newAllowance}${suppressed > 0 ? ` (${suppressed} smoothing events before it not logged)` : ''}`,
    );
  }
}
