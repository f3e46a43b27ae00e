import { Counter, Gauge, type Registry } from 'prom-client';
import { BatchedHistogram } from '../../common/batched-histogram.ts';
import { LabelPairCounter } from '../../common/label-pair-counter.ts';
import { TIMING_SAMPLE_EVERY } from '../../common/sampler.ts';

export interface LimitMetrics {
  decisions: LabelPairCounter<'algorithm', 'outcome'>;
  smoothingEvents: Counter<'reason'>;
  smoothingAllowance: Gauge<'kind' | 'namespace' | 'name'>;
  storeSeconds: BatchedHistogram;
}

/**
 * gw_smoothing_allowance. Of several workers, the primary keeps the one value
 * (docs/architecture.md#workers) and the workers' gauges are omitted from its aggregate:
 * each holds only the last move that worker saw.
 */
export function smoothingAllowanceGauge(registers: Registry[], aggregator: 'omit' | 'sum'): Gauge<'kind' | 'namespace' | 'name'> {
  return new Gauge({
    name: 'gw_smoothing_allowance',
    help: 'The allowance a smoothed limit moved to last, by the resource whose smoothing it is (kind, namespace, name).',
    labelNames: ['kind', 'namespace', 'name'],
    aggregator,
    registers,
  });
}

/** Without a registry the counters still count (tests read them) but are exported nowhere. */
export function createLimitMetrics(registry?: Registry): LimitMetrics {
  const registers = registry ? [registry] : [];
  return {
    decisions: new LabelPairCounter({
      name: 'gw_limit_decisions_total',
      help: 'Rate-limit decisions by the algorithm of the limit that applied and by outcome.',
      labelNames: ['algorithm', 'outcome'],
      registers,
    }),
    smoothingEvents: new Counter({
      name: 'gw_smoothing_events_total',
      help: 'Rate-limit smoothing allowance changes.',
      labelNames: ['reason'],
      registers,
    }),
    smoothingAllowance: smoothingAllowanceGauge(registers, 'omit'),
    storeSeconds: new BatchedHistogram({
      name: 'gw_limit_store_duration_seconds',
      help: `Time of one call to the limit store (for Redis: the round trip of one call of the limit script, queueing in the client included). One call in ${TIMING_SAMPLE_EVERY} is timed.`,
      labelNames: [],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    }),
  };
}
