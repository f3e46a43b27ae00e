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
}

export async function workerMetrics(registry: Registry): Promise<WorkerMetrics> {
  const answer: WorkerMetrics = { metrics: [], series: [] };
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

/** The exposition text of the workers' metrics summed. */
export async function summedText(workers: readonly WorkerMetrics[]): Promise<string> {
  const summed = new Registry();
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
  const aggregated = AggregatorRegistry.aggregate<PrometheusContentType>(workers.map((worker) => worker.metrics));
  return `${await metricsText(aggregated)}\n${await metricsText(summed)}`;
}
