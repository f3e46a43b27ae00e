import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { BatchedHistogram } from '../common/batched-histogram.ts';
import { LabelPairCounter } from '../common/label-pair-counter.ts';
import { TIMING_SAMPLE_EVERY } from '../common/sampler.ts';
import { SESSION_TTL_MS } from './auth/session-cache.ts';

/** The sidecar's own Prometheus metrics; the limit engine registers its own on the same registry. */
export interface SidecarMetrics {
  registry: Registry;
  requests: LabelPairCounter<'api', 'code_class'>;
  gatewayErrors: LabelPairCounter<'api', 'code'>;
  upstreamSeconds: BatchedHistogram<'api'>;
  admissionSeconds: BatchedHistogram<'api'>;
  configReloads: Counter<'source' | 'result'>;
  configReloadErrors: Counter<'api_id'>;
  configProblems: Gauge<'kind' | 'reason'>;
  events: Counter<'reason' | 'result'>;
  redisErrors: Counter;
  sessionChangesTracked: Gauge;
}

/** `processMetrics: false` leaves out Node's process metrics, whose observers live as long as the process (the warm-up's gateway has no use for them). */
export function createSidecarMetrics(registry = new Registry(), { processMetrics = true } = {}): SidecarMetrics {
  if (processMetrics) {
    collectDefaultMetrics({ register: registry, prefix: 'gw_sidecar_' });
    // A limit each worker has alike, not an amount: the primary's sum shows it as one worker's
    // (prom-client leaves it to the default, a sum).
    const maxFds = registry.getSingleMetric('gw_sidecar_process_max_fds');
    if (maxFds) (maxFds as Gauge & { aggregator: string }).aggregator = 'max';
  }
  const registers = [registry];
  return {
    registry,
    requests: new LabelPairCounter({
      name: 'gw_requests_total',
      help: 'Proxied requests by API and status class.',
      labelNames: ['api', 'code_class'],
      registers,
    }),
    gatewayErrors: new LabelPairCounter({
      name: 'gw_gateway_errors_total',
      help: 'Answers the gateway gave itself instead of the upstream\'s, by API and stable error code (the X-GW-Error-Code header).',
      labelNames: ['api', 'code'],
      registers,
    }),
    upstreamSeconds: new BatchedHistogram({
      name: 'gw_upstream_duration_seconds',
      help: `Time from sending a request upstream to its response headers. One request in ${TIMING_SAMPLE_EVERY} is timed.`,
      labelNames: ['api'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    admissionSeconds: new BatchedHistogram({
      name: 'gw_admission_duration_seconds',
      help: `Time the gateway takes to route, authenticate and rate-limit a request before it is forwarded or refused: the latency the gateway adds. One request in ${TIMING_SAMPLE_EVERY} is timed.`,
      labelNames: ['api'],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    }),
    configReloads: new Counter({
      name: 'gw_config_reloads_total',
      help: 'Config loads by source and result.',
      labelNames: ['source', 'result'],
      registers,
    }),
    configReloadErrors: new Counter({
      name: 'gw_config_reload_errors_total',
      help: 'Compiled configs refused as invalid (the last good one is kept).',
      labelNames: ['api_id'],
      registers,
    }),
    configProblems: new Gauge({
      name: 'gw_config_problems',
      help: 'What the config as last loaded could not take as written, or could not receive (ConfigMap WatchFailing: no update reaches the gateway), by kind (resource kind, File, ConfigMap) and reason; what had a last good version keeps it.',
      labelNames: ['kind', 'reason'],
      // Workers load the same config: their counts are one count, not a sum (docs/architecture.md#workers).
      aggregator: 'max',
      registers,
    }),
    events: new Counter({
      name: 'gw_smoothing_event_writes_total',
      help: 'Smoothing events by reason and what became of them (created, aggregated, dropped, failed, logged).',
      labelNames: ['reason', 'result'],
      registers,
    }),
    redisErrors: new Counter({ name: 'gw_redis_client_errors_total', help: 'Redis connection errors seen by the sidecar client.', registers }),
    sessionChangesTracked: new Gauge({
      name: 'gw_session_changes_tracked',
      help: `1 while Redis reports every change to a stored session, so sessions stay cached until they change; 0 while they are read again every ${SESSION_TTL_MS} ms.`,
      // With workers, 1 only when every worker is told of every change.
      aggregator: 'min',
      registers,
    }),
  };
}

/**
 * Drops the request-path series of the APIs not in `loaded`, on each config swap: an API
 * removed from the config leaves no series behind to be scraped until a restart. The series
 * of requests no API matched (`api=""`) stay. With workers, the primary's sum follows, as it
 * sums what the workers hold.
 */
export function retainApiSeries(metrics: SidecarMetrics, loaded: ReadonlySet<string>): void {
  const keep = (api: string): boolean => api === '' || loaded.has(api);
  metrics.requests.retainFirst(keep);
  metrics.gatewayErrors.retainFirst(keep);
  metrics.upstreamSeconds.retain(keep);
  metrics.admissionSeconds.retain(keep);
}

const statusClasses = ['0xx', '1xx', '2xx', '3xx', '4xx', '5xx'];

/** `2xx`, `4xx`, … : a bounded label set, as the same strings every time (no string built per request). */
export const statusClass = (status: number): string => statusClasses[Math.floor(status / 100)] ?? `${Math.floor(status / 100)}xx`;
