import { Counter, Gauge, type Registry } from 'prom-client';
import type { CompiledConfig } from '../../crds/compiled.ts';
import { BatchedHistogram } from '../../common/batched-histogram.ts';
import { LabelPairCounter } from '../../common/label-pair-counter.ts';
import { TIMING_SAMPLE_EVERY } from '../../common/sampler.ts';

export interface LimitMetrics {
  decisions: LabelPairCounter<'algorithm', 'outcome'>;
  smoothingEvents: Counter<'reason'>;
  smoothingAllowance: SmoothingAllowances;
  storeSeconds: BatchedHistogram;
}

export type AllowanceLabels = Record<'kind' | 'namespace' | 'name', string>;

/** A series of gw_smoothing_allowance not moved for this long is dropped (README: metrics). */
export const ALLOWANCE_STALE_MS = 15 * 60_000;
/** The most series gw_smoothing_allowance holds; a move past it drops the series moved longest ago. */
export const MAX_ALLOWANCE_SERIES = 10_000;

/** One string per series, for sets of them. */
export const allowanceId = ({ kind, namespace, name }: AllowanceLabels): string => `${kind}\n${namespace}\n${name}`;

/**
 * gw_smoothing_allowance. Of several workers, the primary keeps the one value
 * (docs/architecture.md#workers) and the workers' gauges are omitted from its aggregate:
 * each holds only the last move that worker saw.
 *
 * A series lives as long as what it describes: a config without its Policy or ApiDefinition
 * drops it (`retainSources`), and a Key's, for which the config carries no signal, goes once
 * it has not moved for ALLOWANCE_STALE_MS. At most MAX_ALLOWANCE_SERIES are held, whatever
 * clients do. The series are kept in the order of their last move, so the stale ones are
 * found at the front, a few at each move and scrape.
 */
export class SmoothingAllowances {
  readonly #gauge: Gauge<'kind' | 'namespace' | 'name'>;
  readonly #now: () => number;
  /** By series id, in the order of the last move. */
  readonly #moved = new Map<string, { labels: AllowanceLabels; at: number }>();

  constructor(registers: Registry[], aggregator: 'omit' | 'sum', now: () => number = Date.now) {
    this.#now = now;
    this.#gauge = new Gauge({
      name: 'gw_smoothing_allowance',
      help: `The allowance a smoothed limit moved to last, by the resource whose smoothing it is (kind, namespace, name); a series not moved for ${ALLOWANCE_STALE_MS / 60_000} minutes is dropped.`,
      labelNames: ['kind', 'namespace', 'name'],
      aggregator,
      registers,
      collect: () => this.#dropStale(),
    });
  }

  set(labels: AllowanceLabels, value: number): void {
    const id = allowanceId(labels);
    this.#moved.delete(id);
    this.#moved.set(id, { labels, at: this.#now() });
    this.#gauge.set(labels, value);
    this.#dropStale();
    if (this.#moved.size > MAX_ALLOWANCE_SERIES) this.#drop(this.#moved.keys().next().value!);
  }

  /**
   * Keeps the series `live` accepts, and those moved at or after `since`: a move that raced
   * the question is not judged by an answer given before it.
   */
  retain(live: (labels: AllowanceLabels) => boolean, since = Infinity): void {
    for (const [id, { labels, at }] of this.#moved) if (at < since && !live(labels)) this.#drop(id);
  }

  /** Drops the series of Policies and ApiDefinitions that `config` no longer has (a Key's is not in it). */
  retainSources(config: CompiledConfig): void {
    // Only Keys' series held (the common case): no set of the config's resources to build.
    let judged = false;
    for (const { labels } of this.#moved.values()) judged ||= labels.kind !== 'Key';
    if (!judged) return;
    const sources = new Set([...config.apis, ...Object.values(config.policies)].map(({ source }) => allowanceId(source)));
    this.retain((labels) => labels.kind === 'Key' || sources.has(allowanceId(labels)));
  }

  #dropStale(): void {
    const before = this.#now() - ALLOWANCE_STALE_MS;
    for (const [id, { at }] of this.#moved) {
      if (at >= before) return;
      this.#drop(id);
    }
  }

  #drop(id: string): void {
    const series = this.#moved.get(id);
    if (series === undefined) return;
    this.#moved.delete(id);
    this.#gauge.remove(series.labels);
  }
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
    smoothingAllowance: new SmoothingAllowances(registers, 'omit'),
    storeSeconds: new BatchedHistogram({
      name: 'gw_limit_store_duration_seconds',
      help: `Time of one call to the limit store (for Redis: the round trip of one call of the limit script, queueing in the client included). One call in ${TIMING_SAMPLE_EVERY} is timed.`,
      labelNames: [],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    }),
  };
}
