import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BatchedHistogram, TIMING_BATCH } from './batched-histogram.ts';

const buckets = [0.001, 0.01, 0.1, 1];

describe('BatchedHistogram', () => {
  it('exposes on a scrape what a prom-client histogram given the same timings exposes', async () => {
    const registry = new Registry();
    const batched = new BatchedHistogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [registry] });
    const plain = new Histogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [] });
    const timings: [number, string][] = [[0.0005, 'a'], [0.05, 'a'], [2, 'b'], [0.001, 'b'], [0.3, 'a']];
    for (const [seconds, api] of timings) {
      batched.observe(seconds, api);
      plain.observe({ api }, seconds);
    }
    expect((await batched.histogram.get()).values).toEqual((await plain.get()).values);
    const text = await registry.metrics();
    expect(text).toMatch(/^test_seconds_count\{api="a"\} 3$/m);
    expect(text).toMatch(/^test_seconds_bucket\{le="0\.001",api="b"\} 1$/m);
    expect(text).toMatch(/^test_seconds_sum\{api="b"\} 2\.001$/m);
  });

  it('counts each timing once however often it is collected', async () => {
    const batched = new BatchedHistogram({ name: 'test_seconds', help: 'Timings.', labelNames: [], buckets, registers: [] });
    const count = async (): Promise<number | undefined> =>
      (await batched.histogram.get()).values.find((v) => v.metricName === 'test_seconds_count')?.value;
    batched.observe(0.002);
    expect(await count()).toBe(1);
    expect(await count()).toBe(1);
    batched.observe(0.02);
    expect(await count()).toBe(2);
  });

  it('hands its timings to the histogram by itself once a batch has gathered, so they never pile up', async () => {
    const batched = new BatchedHistogram<'api'>({ name: 'test_seconds', help: 'Timings.', labelNames: ['api'], buckets, registers: [] });
    for (let i = 0; i < TIMING_BATCH - 1; i++) batched.observe(0.002, 'a');
    expect(batched.pending).toBe(TIMING_BATCH - 1);
    batched.observe(0.002, 'a');
    expect(batched.pending).toBe(0);
    batched.observe(0.002, 'a');
    expect(batched.pending).toBe(1);
    const values = (await batched.histogram.get()).values;
    expect(values.find((v) => v.metricName === 'test_seconds_count')?.value).toBe(TIMING_BATCH + 1);
  });
});
