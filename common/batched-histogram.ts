import type { Metric, Registry } from 'prom-client';
import { labelText, sampleValue, textInPieces, type MetricValues, type TextInPieces } from './metrics-text.ts';

/** How many timings wait before they go into the histogram together. */
export const TIMING_BATCH = 256;

export interface BatchedHistogramConfiguration<L extends string> {
  name: string;
  help: string;
  /** No label, or the one label each timing is recorded under. */
  labelNames: readonly [] | readonly [L];
  buckets: number[];
  registers: Registry[];
}

/** A histogram's configuration and counts as plain data: what a worker gives the primary to sum (sidecar/workers/metrics.ts). */
export interface HistogramSnapshot {
  kind: 'histogram';
  name: string;
  help: string;
  labelNames: readonly string[];
  buckets: number[];
  /** Each series' label value. */
  labelValues: string[];
  /** Each series' timings per bucket (not cumulative), then its count and sum, one series after another: flat numbers are cheap to build and to send. */
  counts: number[];
}

interface Series {
  labelValue: string;
  /** `{api="x"}`-style label text without braces, escaped once when the series is first seen. */
  labelText: string;
  /** Timings per bucket (not cumulative), by the index of the bucket's upper bound. */
  inBucket: Float64Array;
  count: number;
  sum: number;
}

/**
 * A Prometheus histogram for the request path, observed in batches. One prom-client `observe`
 * costs half a microsecond in a loop, but about 7 µs on the request path, where the one timed
 * request in eight finds its code and data gone from the CPU's caches (measured in a loaded
 * sidecar: docs/benchmarks.md#measured-away-and-measured-and-not-kept). Here a timing is stored in two arrays and goes into its
 * bucket in one loop when `TIMING_BATCH` have gathered, or when the histogram is read: on a
 * scrape, or when the primary gathers its workers' metrics. So a scrape sees every timing
 * recorded before it. It sits in the registry beside prom-client's metrics, counts as
 * prom-client's histogram does (a timing goes into the first bucket whose bound it does not
 * exceed), gives prom-client its values with `get()`, and writes its own text for a scrape,
 * a piece at a time (common/metrics-text.ts).
 */
export class BatchedHistogram<L extends string = never> implements TextInPieces {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #labelName: L | undefined;
  readonly #bounds: readonly number[];
  /** `name_bucket{le="0.001"`, …, `name_bucket{le="+Inf"`: the start of each bucket's line. */
  readonly #bucketStarts: readonly string[];
  // Label values are the caller's long-lived strings (API ids): holding them allocates nothing.
  readonly #labelValues: string[] = [];
  readonly #seconds = new Float64Array(TIMING_BATCH);
  readonly #series = new Map<string, Series>();
  #pending = 0;

  constructor({ name, help, labelNames, buckets, registers }: BatchedHistogramConfiguration<L>) {
    this.name = name;
    this.help = help;
    this.#labelName = labelNames[0];
    this.#bounds = [...buckets];
    this.#bucketStarts = [...this.#bounds.map(sampleValue), '+Inf'].map((le) => `${name}_bucket{le="${le}"`);
    // As prom-client's: a histogram without labels shows its one series, zeros, from the start.
    if (this.#labelName === undefined) this.#seriesOf('');
    // prom-client's registry takes any object with its metrics' name and get(); its types
    // name only its own classes.
    for (const registry of registers) registry.registerMetric(this as unknown as Metric);
  }

  /** How many timings wait for the histogram: never `TIMING_BATCH`. */
  get pending(): number {
    return this.#pending;
  }

  /** Records one timing under `labelValue` (ignored when the histogram has no label). */
  observe(seconds: number, labelValue = ''): void {
    const at = this.#pending;
    this.#seconds[at] = seconds;
    this.#labelValues[at] = labelValue;
    this.#pending = at + 1;
    if (this.#pending === TIMING_BATCH) this.#flush();
  }

  /** A histogram of the same configuration, empty, in `registers`: the primary sums its workers' snapshots into it. */
  static like(snapshot: HistogramSnapshot, registers: Registry[]): BatchedHistogram<string> {
    const { name, help, labelNames, buckets } = snapshot;
    return new BatchedHistogram<string>({ name, help, labelNames: labelNames.length === 0 ? [] : [labelNames[0]!], buckets, registers });
  }

  snapshot(): HistogramSnapshot {
    this.#flush();
    const labelValues: string[] = [];
    const counts: number[] = [];
    for (const { labelValue, inBucket, count, sum } of this.#series.values()) {
      labelValues.push(labelValue);
      for (let i = 0; i < inBucket.length; i++) counts.push(inBucket[i]!);
      counts.push(count, sum);
    }
    return { kind: 'histogram', name: this.name, help: this.help, labelNames: this.#labelName === undefined ? [] : [this.#labelName], buckets: [...this.#bounds], labelValues, counts };
  }

  /** Adds a snapshot's counts of a histogram of the same configuration. */
  add({ labelValues, counts }: HistogramSnapshot): void {
    const perSeries = this.#bounds.length + 2;
    for (let at = 0; at < labelValues.length; at++) {
      const series = this.#seriesOf(labelValues[at]!);
      const from = at * perSeries;
      for (let i = 0; i < series.inBucket.length; i++) series.inBucket[i]! += counts[from + i]!;
      series.count += counts[from + perSeries - 2]!;
      series.sum += counts[from + perSeries - 1]!;
    }
  }

  /** Drops every series whose label value `keep` refuses (sidecar/metrics.ts: an API no longer loaded), timings still waiting included. */
  retain(keep: (labelValue: string) => boolean): void {
    this.#flush();
    for (const labelValue of this.#series.keys()) if (!keep(labelValue)) this.#series.delete(labelValue);
  }

  /** Its values as prom-client's histograms give theirs. */
  get(): Promise<MetricValues> {
    this.#flush();
    const values: MetricValues['values'] = [];
    const bucketName = `${this.name}_bucket`;
    for (const series of this.#series.values()) {
      const labels: Record<string, string> = this.#labelName === undefined ? {} : { [this.#labelName]: series.labelValue };
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += series.inBucket[i]!;
        values.push({ labels: { le: this.#bounds[i]!, ...labels }, value: cumulative, metricName: bucketName });
      }
      values.push({ labels: { le: '+Inf', ...labels }, value: series.count, metricName: bucketName });
      values.push({ labels: { ...labels }, value: series.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { ...labels }, value: series.count, metricName: `${this.name}_count` });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values });
  }

  textPieces(): Iterable<string> {
    this.#flush();
    return textInPieces(this.name, this.help, this.type, this.#series.values(), (series) => this.#seriesText(series));
  }

  #seriesText({ labelText: labels, inBucket, count, sum }: Series): string {
    const afterLe = labels === '' ? '} ' : `,${labels}} `;
    let text = '';
    let cumulative = 0;
    for (let i = 0; i < this.#bounds.length; i++) {
      cumulative += inBucket[i]!;
      text += `${this.#bucketStarts[i]}${afterLe}${cumulative}\n`;
    }
    const braces = labels === '' ? ' ' : `{${labels}} `;
    return `${text}${this.#bucketStarts[this.#bounds.length]}${afterLe}${count}\n${this.name}_sum${braces}${sampleValue(sum)}\n${this.name}_count${braces}${count}`;
  }

  #flush(): void {
    const bounds = this.#bounds;
    for (let i = 0; i < this.#pending; i++) {
      const seconds = this.#seconds[i]!;
      const series = this.#seriesOf(this.#labelName === undefined ? '' : this.#labelValues[i]!);
      let bucket = 0;
      while (bucket < bounds.length && seconds > bounds[bucket]!) bucket++;
      if (bucket < bounds.length) series.inBucket[bucket]!++;
      series.count++;
      series.sum += seconds;
    }
    this.#pending = 0;
  }

  #seriesOf(labelValue: string): Series {
    let series = this.#series.get(labelValue);
    if (series === undefined) {
      const labels = this.#labelName === undefined ? '' : labelText([this.#labelName], [labelValue]);
      this.#series.set(labelValue, (series = { labelValue, labelText: labels, inBucket: new Float64Array(this.#bounds.length), count: 0, sum: 0 }));
    }
    return series;
  }
}
