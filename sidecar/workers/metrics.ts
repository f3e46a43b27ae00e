/**
 * The metrics a worker gives the primary, and the primary's sum of them
 * (docs/architecture.md#workers). prom-client's own metrics travel as prom-client gives them
 * and are summed by its AggregatorRegistry, each by its own aggregator. The request-path
 * metrics, whose series grow with the APIs served, travel as snapshots of their counts: a
 * worker serving 1,000 APIs builds and sends a few hundred kilobytes of numbers instead of
 * prom-client's object per sample (megabytes of JSON, built and written in one piece while its
 * requests wait).
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { AggregatorRegistry, Registry, type MetricObjectWithValues, type MetricValue, type PrometheusContentType } from 'prom-client';
import { BatchedHistogram, type HistogramSnapshot } from '../../common/batched-histogram.ts';
import { LabelPairCounter, type CounterSnapshot } from '../../common/label-pair-counter.ts';
import { metricsText } from '../../common/metrics-text.ts';

export interface WorkerMetrics {
  /** prom-client's own metrics, as its `get()` gives them. */
  metrics: MetricObjectWithValues<MetricValue<string>>[];
  /** The request-path metrics' counts. */
  series: (HistogramSnapshot | CounterSnapshot)[];
  /** The ids of the APIs the worker loads: what ended workers counted for the others leaves the sum. */
  apis?: string[];
}

export async function workerMetrics(registry: Registry, apis?: string[]): Promise<WorkerMetrics> {
  const answer: WorkerMetrics = { metrics: [], series: [], ...(apis && { apis }) };
  for (const { name } of registry.getMetricsAsArray()) {
    // A turn between metrics: the requests in flight wait for one metric at most.
    await nextTurn();
    const metric = registry.getSingleMetric(name)!;
    const own: object = metric;
    if (own instanceof BatchedHistogram || own instanceof LabelPairCounter) answer.series.push(own.snapshot());
    else answer.metrics.push(await metric.get());
  }
  return answer;
}

/** The request-path series of `workers`, summed into `registry`; each summed metric by its name. */
function sumSeries(workers: readonly WorkerMetrics[], summed: Registry): (BatchedHistogram<string> | LabelPairCounter<string, string>)[] {
  const histograms = new Map<string, BatchedHistogram<string>>();
  const counters = new Map<string, LabelPairCounter<string, string>>();
  for (const { series } of workers) {
    for (const snapshot of series) {
      if (snapshot.kind === 'histogram') {
        let histogram = histograms.get(snapshot.name);
        if (histogram === undefined) histograms.set(snapshot.name, (histogram = BatchedHistogram.like(snapshot, [summed])));
        histogram.add(snapshot);
      } else {
        let counter = counters.get(snapshot.name);
        if (counter === undefined) counters.set(snapshot.name, (counter = LabelPairCounter.like(snapshot, [summed])));
        counter.add(snapshot);
      }
    }
  }
  return [...histograms.values(), ...counters.values()];
}

/** The exposition text of the workers' metrics summed. */
export async function summedText(workers: readonly WorkerMetrics[]): Promise<string> {
  const summed = new Registry();
  sumSeries(workers, summed);
  const aggregated = AggregatorRegistry.aggregate<PrometheusContentType>(workers.map((worker) => worker.metrics));
  return `${await metricsText(aggregated)}\n${await metricsText(summed)}`;
}

const MONOTONIC_TYPES: ReadonlySet<string> = new Set(['counter', 'histogram']);

/**
 * What ended workers counted, in one: their counters and histograms as last read, summed. It
 * stays in the primary's sum, so a worker's restart does not take its counts out of it, which
 * Prometheus would read as a counter reset (docs/architecture.md#workers). Gauges go with the
 * worker. What a worker counted after its last scrape is lost with it.
 */
export async function retiredMetrics(ended: readonly WorkerMetrics[]): Promise<WorkerMetrics> {
  const series = sumSeries(ended, new Registry()).map((metric) => metric.snapshot());
  // prom-client's `get()` names the type ('counter'), whatever its typings' enum says.
  const monotonic = ended.map((worker) => worker.metrics.filter((metric) => MONOTONIC_TYPES.has(String(metric.type))));
  const metrics = await AggregatorRegistry.aggregate(monotonic).getMetricsAsJSON();
  return { metrics, series };
}

/**
 * `metrics` less the request-path series of the APIs not in `loaded` (those of requests no
 * API matched stay), as a worker's own drop at a config swap (sidecar/metrics.ts).
 */
function onlyLoadedApis(metrics: WorkerMetrics, loaded: ReadonlySet<string>): WorkerMetrics {
  const keep = (api: string): boolean => api === '' || loaded.has(api);
  const series = metrics.series.map((snapshot) => {
    if (snapshot.labelNames[0] !== 'api') return snapshot;
    if (snapshot.kind === 'histogram') {
      const histogram = BatchedHistogram.like(snapshot, []);
      histogram.add(snapshot);
      histogram.retain(keep);
      return histogram.snapshot();
    }
    const counter = LabelPairCounter.like(snapshot, []);
    counter.add(snapshot);
    counter.retainFirst(keep);
    return counter.snapshot();
  });
  return { ...metrics, series };
}

/**
 * The primary's /metrics sum: the started workers' metrics, with what ended workers counted
 * (`retiredMetrics`), which stays in it for good.
 */
export class WorkersMetricsSum {
  #retired: Promise<WorkerMetrics | undefined> = Promise.resolve(undefined);
  /** Each worker's metrics as the last scrape read them, by worker index. */
  readonly #last = new Map<number, WorkerMetrics>();

  /** Worker `index` ended: what it had counted by the last scrape stays in the sum. */
  ended(index: number): void {
    const last = this.#last.get(index);
    this.#last.delete(index);
    if (last) this.#retired = this.#retired.then((before) => retiredMetrics(before ? [before, last] : [last]));
  }

  /** The text of `workers` (each worker's index and metrics, as just read) summed with the retired counts. */
  async text(workers: readonly { index: number; metrics: WorkerMetrics }[]): Promise<string> {
    for (const { index, metrics } of workers) this.#last.set(index, metrics);
    // Every worker tells the APIs it loads (they may be between two configs): the ended
    // workers' counts of an API none of them loads go, as the live workers' own have.
    if (workers.length > 0 && workers.every(({ metrics }) => metrics.apis !== undefined)) {
      const loaded = new Set(workers.flatMap(({ metrics }) => metrics.apis!));
      this.#retired = this.#retired.then((retired) => retired && onlyLoadedApis(retired, loaded));
    }
    const retired = await this.#retired;
    const all = workers.map((w) => w.metrics);
    return summedText(retired ? [...all, retired] : all);
  }
}
