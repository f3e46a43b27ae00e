import { AggregatorRegistry, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { metricsText } from '../../common/metrics-text.ts';
import { createLimitMetrics } from '../limits/metrics.ts';
import { createSidecarMetrics, statusClass } from '../metrics.ts';
import { retiredMetrics, summedText, workerMetrics, WorkersMetricsSum, type WorkerMetrics } from './metrics.ts';

/** A worker's registry after `requests` requests to each of `apis` APIs. */
function workerAfterTraffic(apis: number, requests: number, seed: number): Registry {
  const registry = new Registry();
  const sidecar = createSidecarMetrics(registry, { processMetrics: false });
  const limits = createLimitMetrics(registry);
  for (let r = 0; r < requests; r++) {
    for (let i = 0; i < apis; i++) {
      const api = `api-${(i + seed) % apis}`;
      sidecar.requests.inc(api, statusClass(r % 3 === 0 ? 429 : 200));
      if (r % 3 === 0) sidecar.gatewayErrors.inc(api, 'RateLimited');
      sidecar.upstreamSeconds.observe(((i * 7 + r + seed) % 50) / 1000, api);
      sidecar.admissionSeconds.observe(((i + r * seed) % 40) / 100_000, api);
      limits.decisions.inc('sliding_log', r % 3 === 0 ? 'limited' : 'allowed');
      limits.storeSeconds.observe(((r + seed) % 9) / 10_000);
    }
  }
  sidecar.configReloads.inc({ source: 'folder', result: 'ok' });
  sidecar.sessionChangesTracked.set(seed % 2);
  return registry;
}

/** What the IPC channel delivers: the answer through JSON. */
const overTheChannel = (answer: WorkerMetrics): WorkerMetrics => JSON.parse(JSON.stringify(answer)) as WorkerMetrics;
/** A text's metrics, each with its lines, whatever their order. */
const metricsOf = (text: string): Set<string> => new Set(text.split('\n\n').map((metric) => metric.trim()).filter((metric) => metric !== ''));

describe("the primary's sum of its workers' metrics", () => {
  it("reads as prom-client's aggregate of the same workers: request-path metrics summed, the others by their own aggregators", async () => {
    const workers = [workerAfterTraffic(30, 7, 1), workerAfterTraffic(30, 5, 2), workerAfterTraffic(12, 3, 3)];
    const summed = await summedText(await Promise.all(workers.map(async (w) => overTheChannel(await workerMetrics(w)))));
    const aggregate = AggregatorRegistry.aggregate(await Promise.all(workers.map((w) => w.getMetricsAsJSON())));
    expect(metricsOf(summed)).toEqual(metricsOf(await aggregate.metrics()));
    expect(summed).toMatch(/^gw_requests_total\{api="api-3",code_class="4xx"\} 6$/m);
    expect(summed).toMatch(/^gw_limit_store_duration_seconds_count 396$/m);
    // A gauge keeps its own aggregator: the least of the workers'.
    expect(summed).toMatch(/^gw_session_changes_tracked 0$/m);
    expect(summed).toMatch(/^gw_config_reloads_total\{source="folder",result="ok"\} 3$/m);
  });

  it("sends the request-path metrics of a worker serving 1,000 APIs in a tenth of the bytes prom-client's values take", async () => {
    const worker = workerAfterTraffic(1000, 2, 1);
    const sent = JSON.stringify(await workerMetrics(worker)).length;
    expect(sent).toBeLessThan(JSON.stringify(await worker.getMetricsAsJSON()).length / 10);
    // One worker's sum is its own metrics, but for the gauge whose aggregator omits it (the primary keeps its own).
    const own = [...metricsOf(await metricsText(worker))].filter((metric) => !metric.includes('# TYPE gw_smoothing_allowance '));
    expect(metricsOf(await summedText([overTheChannel(await workerMetrics(worker))]))).toEqual(new Set(own));
  });

  it('keeps what ended workers counted in the sum, counters and histograms alike, and drops their gauges', async () => {
    const [live, first, second] = await Promise.all([workerAfterTraffic(30, 7, 1), workerAfterTraffic(30, 5, 2), workerAfterTraffic(12, 3, 3)].map(async (w) => overTheChannel(await workerMetrics(w))));
    // Two workers ended one after the other: the second folds into what the first left.
    const retired = await retiredMetrics([await retiredMetrics([first!]), second!]);
    const summed = await summedText([live!, overTheChannel(retired)]);
    expect(summed).toMatch(/^gw_requests_total\{api="api-3",code_class="4xx"\} 6$/m);
    expect(summed).toMatch(/^gw_limit_store_duration_seconds_count 396$/m);
    expect(summed).toMatch(/^gw_config_reloads_total\{source="folder",result="ok"\} 3$/m);
    // The ended workers' gauge (0) is gone with them: only the live worker's (1) is left.
    expect(summed).toMatch(/^gw_session_changes_tracked 1$/m);
  });

  it('drops what ended workers counted for an API no live worker loads any more', async () => {
    const sum = new WorkersMetricsSum();
    const ids = (apis: number): string[] => Array.from({ length: apis }, (_, i) => `api-${i}`);
    const [live, ending] = await Promise.all([workerAfterTraffic(2, 4, 1), workerAfterTraffic(3, 4, 2)].map(async (w) => overTheChannel(await workerMetrics(w, ids(3)))));
    await sum.text([{ index: 0, metrics: live! }, { index: 1, metrics: ending! }]);
    sum.ended(1);
    // The config now loads api-0 and api-1: api-2's series, counted by the ended worker alone, go.
    const summed = await sum.text([{ index: 0, metrics: { ...live!, apis: ids(2) } }]);
    expect(summed).not.toContain('api="api-2"');
    expect(summed).toMatch(/^gw_requests_total\{api="api-0",code_class="2xx"\} 4$/m);
    expect(summed).toMatch(/^gw_upstream_duration_seconds_count\{api="api-1"\} 8$/m);
    expect(summed).toMatch(/^gw_limit_store_duration_seconds_count 20$/m);
  });

  it("shows the workers' file descriptor limit as one worker's, not their sum; their open descriptors summed", async () => {
    const workers = [new Registry(), new Registry()];
    for (const registry of workers) createSidecarMetrics(registry);
    const summed = await summedText(await Promise.all(workers.map(async (w) => overTheChannel(await workerMetrics(w)))));
    const valueOf = (text: string, name: string): number => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1]);
    const one = valueOf(await workers[0]!.metrics(), 'gw_sidecar_process_max_fds');
    expect(one).toBeGreaterThan(0);
    expect(valueOf(summed, 'gw_sidecar_process_max_fds')).toBe(one);
    expect(valueOf(summed, 'gw_sidecar_process_open_fds')).toBeGreaterThanOrEqual(valueOf(await workers[0]!.metrics(), 'gw_sidecar_process_open_fds'));
  });
});
