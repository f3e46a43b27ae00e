import { setImmediate as nextTurn } from 'node:timers/promises';
import fc from 'fast-check';
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BatchedHistogram } from './batched-histogram.ts';
import { LabelPairCounter } from './label-pair-counter.ts';
import { SERIES_PER_TURN, metricsText } from './metrics-text.ts';

const buckets = [0.0005, 0.001, 0.01, 0.25, 1];

/** The same metrics twice: gw's request-path ones in `ours`, prom-client's own in `theirs`, with a prom-client gauge in both. */
function twoRegistries() {
  const ours = new Registry();
  const theirs = new Registry();
  const both = { ours, theirs };
  const gauges = Object.values(both).map((registry) => new Gauge({ name: 'test_gauge', help: 'A gauge.', labelNames: ['kind'], registers: [registry] }));
  const timed = new BatchedHistogram<'api'>({ name: 'test_seconds', help: 'Timings\\ by "API"\nper line.', labelNames: ['api'], buckets, registers: [ours] });
  const timedPlain = new Histogram<'api'>({ name: 'test_seconds', help: 'Timings\\ by "API"\nper line.', labelNames: ['api'], buckets, registers: [theirs] });
  const calls = new BatchedHistogram({ name: 'test_call_seconds', help: 'Calls.', labelNames: [], buckets, registers: [ours] });
  const callsPlain = new Histogram({ name: 'test_call_seconds', help: 'Calls.', buckets, registers: [theirs] });
  const counted = new LabelPairCounter({ name: 'test_total', help: 'Counts.', labelNames: ['api', 'code'], registers: [ours] });
  const countedPlain = new Counter({ name: 'test_total', help: 'Counts.', labelNames: ['api', 'code'], registers: [theirs] });
  return {
    ours,
    theirs,
    time(api: string, seconds: number) {
      timed.observe(seconds, api);
      timedPlain.observe({ api }, seconds);
      calls.observe(seconds);
      callsPlain.observe(seconds);
    },
    count(api: string, code: string) {
      counted.inc(api, code);
      countedPlain.inc({ api, code });
    },
    gauge(kind: string, value: number) {
      for (const gauge of gauges) gauge.set({ kind }, value);
    },
  };
}

describe('metricsText', () => {
  it('writes what prom-client writes for the same values, label values of any text included, over several pieces', async () => {
    const labelValue = fc.oneof(fc.string({ unit: 'grapheme', maxLength: 12 }), fc.constantFrom('a"b', 'c\\d', 'e\nf', ''));
    const seconds = fc.oneof(fc.double({ min: 0, max: 2, noNaN: true }), fc.constantFrom(...buckets));
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(labelValue, seconds), { maxLength: 600 }),
        fc.array(fc.tuple(labelValue, fc.constantFrom('2xx', '4xx', 'x"y')), { maxLength: 300 }),
        fc.array(fc.tuple(labelValue, fc.integer({ min: -5, max: 5 })), { maxLength: 5 }),
        async (timings, counts, gauges) => {
          const metrics = twoRegistries();
          for (const [api, value] of timings) metrics.time(api, value);
          for (const [api, code] of counts) metrics.count(api, code);
          for (const [kind, value] of gauges) metrics.gauge(kind, value);
          expect(await metricsText(metrics.ours)).toBe(await metrics.theirs.metrics());
        },
      ),
      { numRuns: 60 },
    );
  });

  it('gives prom-client values that the primary sums across workers as it sums its own metrics', async () => {
    const workers = [twoRegistries(), twoRegistries()];
    workers[0]!.time('a', 0.002);
    workers[0]!.time('b', 0.3);
    workers[1]!.time('a', 0.0001);
    workers[0]!.count('a', '2xx');
    workers[1]!.count('a', '2xx');
    workers[1]!.count('b', '4xx');
    const ours = AggregatorRegistry.aggregate(await Promise.all(workers.map((w) => w.ours.getMetricsAsJSON())));
    const theirs = AggregatorRegistry.aggregate(await Promise.all(workers.map((w) => w.theirs.getMetricsAsJSON())));
    const text = await ours.metrics();
    expect(text).toBe(await theirs.metrics());
    expect(text).toMatch(/^test_total\{api="a",code="2xx"\} 2$/m);
    expect(text).toMatch(/^test_seconds_count\{api="a"\} 2$/m);
  });

  it('gives the event loop a turn between pieces, where prom-client writes the whole scrape in one', async () => {
    const apis = 20 * SERIES_PER_TURN;
    const metrics = twoRegistries();
    for (let i = 0; i < apis; i++) {
      metrics.time(`api-${i}`, 0.003);
      metrics.count(`api-${i}`, '2xx');
    }
    /** How many turns of the event loop pass while `scrape` runs. */
    const turnsDuring = async (scrape: Promise<string>): Promise<number> => {
      let done = false;
      let turns = 0;
      const scraped = scrape.then((text) => {
        done = true;
        return text;
      });
      while (!done) {
        await nextTurn();
        turns++;
      }
      await scraped;
      return turns;
    };
    // Two metrics of 2,000 series each: 20 pieces each at the least.
    expect(await turnsDuring(metricsText(metrics.ours))).toBeGreaterThanOrEqual((2 * apis) / SERIES_PER_TURN);
    expect(await turnsDuring(metrics.theirs.metrics())).toBeLessThanOrEqual(1);
  });
});
