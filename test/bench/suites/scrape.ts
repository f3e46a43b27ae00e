/**
 * A Prometheus scrape of a gateway serving many APIs (the admin gateway with GW_APIS=*), in
 * the bench's process: the sidecar's metrics after traffic to each of 1,000 APIs, written by
 * gw's scrape in pieces (`metricsText`) and, as the baseline, what gw did before: the same
 * series in prom-client's own counters and histograms, written by prom-client's
 * `registry.metrics()` in one piece. Rows: the time a scrape takes, and the longest the event
 * loop waits for a turn while one runs, which is how long requests in flight wait on it. The
 * same for a worker's part of a scrape under --workers: prom-client's values as JSON before,
 * the snapshots of gw's counts now. Interleaved rounds, medians kept.
 */
import { Counter, Histogram, Registry } from 'prom-client';
import { BatchedHistogram } from '../../../common/batched-histogram.ts';
import { LabelPairCounter } from '../../../common/label-pair-counter.ts';
import { metricsText } from '../../../common/metrics-text.ts';
import { createLimitMetrics } from '../../../sidecar/limits/metrics.ts';
import { createSidecarMetrics, statusClass } from '../../../sidecar/metrics.ts';
import { workerMetrics } from '../../../sidecar/workers/metrics.ts';
import { median, overRounds } from '../http-load.ts';
import { timedInLoop, type LoopTiming } from '../loop-wait.ts';
import type { BenchRow, BenchSuite } from '../types.ts';

const SUITE = 'scrape';
const APIS = 1_000;
const ROUNDS = 7;

function metricsAfterTraffic(): Registry {
  const registry = new Registry();
  const sidecar = createSidecarMetrics(registry);
  const limits = createLimitMetrics(registry);
  for (let round = 0; round < 20; round++) {
    for (let i = 0; i < APIS; i++) {
      const api = `api-${i}`;
      sidecar.requests.inc(api, statusClass(200));
      sidecar.requests.inc(api, statusClass(429));
      sidecar.gatewayErrors.inc(api, 'RateLimited');
      sidecar.upstreamSeconds.observe(0.0005 + ((i * 7 + round) % 100) / 10_000, api);
      sidecar.admissionSeconds.observe(0.00005 + ((i * 3 + round) % 100) / 100_000, api);
      limits.decisions.inc('sliding_log', round % 2 === 0 ? 'allowed' : 'limited');
      limits.storeSeconds.observe(0.0003);
    }
  }
  return registry;
}

/**
 * The same metrics as prom-client's own: the request-path ones as its counters and histograms
 * with the same series and counts (a histogram's timings each at its bucket's bound, so only
 * the sums differ), the others shared.
 */
function asPromClientMetrics(registry: Registry): Registry {
  const twin = new Registry();
  for (const { name } of registry.getMetricsAsArray()) {
    const metric: object = registry.getSingleMetric(name)!;
    if (metric instanceof LabelPairCounter) {
      const { help, labelNames, labelValues, counts } = metric.snapshot();
      const counter = new Counter({ name, help, labelNames, registers: [twin] });
      counts.forEach((count, at) => counter.inc({ [labelNames[0]]: labelValues[2 * at]!, [labelNames[1]]: labelValues[2 * at + 1]! }, count));
    } else if (metric instanceof BatchedHistogram) {
      const { help, labelNames, buckets, labelValues, counts } = metric.snapshot();
      const histogram = new Histogram({ name, help, labelNames, buckets, registers: [twin] });
      labelValues.forEach((labelValue, at) => {
        const labels = labelNames.length === 0 ? {} : { [labelNames[0]!]: labelValue };
        for (let bucket = 0; bucket <= buckets.length; bucket++) {
          const inBucket = bucket < buckets.length ? counts[at * (buckets.length + 2) + bucket]! : 0;
          for (let i = 0; i < inBucket; i++) histogram.observe(labels, buckets[bucket]!);
        }
      });
    } else {
      twin.registerMetric(registry.getSingleMetric(name)!);
    }
  }
  return twin;
}

const scrapeSuite: BenchSuite = async (ctx) => {
  const registry = metricsAfterTraffic();
  const before = asPromClientMetrics(registry);
  // Node's process metrics (gw_sidecar_*) may gain a series between two scrapes; gw's may not.
  const gwSeries = (text: string): string[] => text.split('\n').filter((line) => /^gw_(?!sidecar_)/.test(line)).map((line) => line.split(' ')[0]!);
  const text = await metricsText(registry);
  if (gwSeries(text).join() !== gwSeries(await before.metrics()).join()) throw new Error('the baseline does not have the same series');
  ctx.log(`${SUITE}: ${APIS.toLocaleString('en')} APIs, ${text.split('\n').length.toLocaleString('en')} lines per scrape`);
  // Each pair: the baseline, then gw. With workers, a worker's part of a scrape is what it
  // builds and writes to the IPC channel (the primary, which serves no request, sums).
  const pairs = [
    ['a scrape', { 'prom-client, in one piece': () => before.metrics(), 'gw, in pieces': () => metricsText(registry) }],
    [
      "a worker's part of a scrape",
      {
        "prom-client's values as JSON": async () => JSON.stringify(await before.getMetricsAsJSON()),
        "gw's snapshots as JSON": async () => JSON.stringify(await workerMetrics(registry)),
      },
    ],
  ] as const;
  const results = new Map<string, LoopTiming[]>();
  for (const [, ways] of pairs) for (const [way, scrape] of Object.entries(ways)) {
    results.set(way, []);
    // Warm each writer before the measured rounds.
    await scrape();
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const [, ways] of pairs) for (const [way, scrape] of Object.entries(ways)) results.get(way)!.push(await timedInLoop(scrape));
  }
  const rows: BenchRow[] = [];
  for (const [what, ways] of pairs) {
    const [baseline, ours] = Object.keys(ways) as [string, string];
    for (const [figure, pick] of [
      ['time', (r: LoopTiming) => r.totalMs],
      ['longest event-loop wait', (r: LoopTiming) => r.longestWaitMs],
    ] as const) {
      const name = (way: string): string => `${what}, ${APIS.toLocaleString('en')} APIs, ${figure}: ${way}`;
      const base = results.get(baseline)!.map(pick);
      const mine = results.get(ours)!.map(pick);
      rows.push({ suite: SUITE, name: name(baseline), value: Number(median(base).toFixed(2)), unit: 'ms' });
      rows.push({ suite: SUITE, name: name(ours), value: Number(median(mine).toFixed(2)), unit: 'ms', baseline: name(baseline), ...overRounds(mine.map((v, i) => v / base[i]!)) });
    }
  }
  return rows;
};

export default scrapeSuite;
