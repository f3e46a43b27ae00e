import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BatchedHistogram, TIMING_BATCH } from './batched-histogram.ts';
import { metricsText } from './metrics-text.ts';

const buckets = [0.001, 0.01, 0.1, 1];

const countOf = async (histogram: BatchedHistogram<string>, labels: Record<string, string> = {}): Promise<number | undefined> =>
  (await histogram.get()).values.find((v) => v.metricName === 'test_seconds_count' && JSON.stringify(v.labels) === JSON.stringify(labels))?.value;

describe('BatchedHistogram', () => {
  it('exposes on a scrape, and gives prom-client, what a prom-client histogram given the same timings does', async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const batched = new BatchedHistogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [ours] });
    const plain = new Histogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [theirs] });
    const timings: [number, string][] = [[0.0005, 'a'], [0.05, 'a'], [2, 'b'], [0.001, 'b'], [0.3, 'a']];
    for (const [seconds, api] of timings) {
      batched.observe(seconds, api);
      plain.observe({ api }, seconds);
    }
    const text = await metricsText(ours);
    expect(text).toBe(await theirs.metrics());
    expect(text).toMatch(/^test_seconds_count\{api="a"\} 3$/m);
    expect(text).toMatch(/^test_seconds_bucket\{le="0\.001",api="b"\} 1$/m);
    expect(text).toMatch(/^test_seconds_sum\{api="b"\} 2\.001$/m);
    // prom-client's histograms add an exemplar (null) to each bucket; the aggregate ignores it.
    const withoutExemplars = (await theirs.getMetricsAsJSON()).map((metric) => ({
      ...metric,
      values: metric.values.map((value) => Object.fromEntries(Object.entries(value).filter(([field]) => field !== 'exemplar'))),
    }));
    expect(await ours.getMetricsAsJSON()).toEqual(withoutExemplars);
  });

  it('shows its one series at zero before any timing when it has no label, as prom-client does', async () => {
    const ours = new Registry();
    const theirs = new Registry();
    new BatchedHistogram({ name: 'test_seconds', help: 'Timings.', labelNames: [], buckets, registers: [ours] });
    new Histogram({ name: 'test_seconds', help: 'Timings.', buckets, registers: [theirs] });
    expect(await metricsText(ours)).toBe(await theirs.metrics());
    expect(await metricsText(ours)).toMatch(/^test_seconds_count 0$/m);
  });

  it('counts each timing once however often it is read', async () => {
    const batched = new BatchedHistogram({ name: 'test_seconds', help: 'Timings.', labelNames: [], buckets, registers: [] });
    batched.observe(0.002);
    expect(await countOf(batched)).toBe(1);
    expect(await countOf(batched)).toBe(1);
    batched.observe(0.02);
    expect(await countOf(batched)).toBe(2);
  });

  it('takes its waiting timings in by itself once a batch has gathered, so they never pile up', async () => {
    const batched = new BatchedHistogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [] });
    for (let i = 0; i < TIMING_BATCH - 1; i++) batched.observe(0.002, 'a');
    expect(batched.pending).toBe(TIMING_BATCH - 1);
    batched.observe(0.002, 'a');
    expect(batched.pending).toBe(0);
    batched.observe(0.002, 'a');
    expect(batched.pending).toBe(1);
    expect(await countOf(batched, { api: 'a' })).toBe(TIMING_BATCH + 1);
  });

  it('drops the series of the label values refused, timings still waiting included', async () => {
    const batched = new BatchedHistogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [] });
    batched.observe(0.002, 'a');
    batched.observe(0.002, 'b');
    await countOf(batched, { api: 'a' });
    batched.observe(0.002, 'b');
    batched.observe(0.002, 'a');
    batched.retain((api) => api === 'a');
    expect(await countOf(batched, { api: 'a' })).toBe(2);
    expect(await countOf(batched, { api: 'b' })).toBeUndefined();
    expect(batched.snapshot().labelValues).toEqual(['a']);
  });
});

