import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The operator's Prometheus metrics, on a registry of its own (several operators may share a process in tests). */
export class OperatorMetrics {
  readonly registry = new Registry();
  readonly reconciles: Counter<'kind' | 'result'>;
  readonly reconcileSeconds: Histogram<'kind'>;
  readonly queueDepth: Gauge<'kind'>;
  readonly leader: Gauge;
  readonly configMapWrites: Counter<'action'>;
  readonly webhookReviews: Counter<'result'>;
  readonly sessionsRestored: Counter;
  readonly orphanSessionsRemoved: Counter;

  constructor(queueDepths: () => Record<string, number>, withDefaults = true) {
    if (withDefaults) collectDefaultMetrics({ register: this.registry, prefix: 'gw_operator_' });
    this.reconciles = new Counter({
      name: 'gw_operator_reconciles_total',
      help: 'Reconciles by kind and result (success, error).',
      labelNames: ['kind', 'result'],
      registers: [this.registry],
    });
    this.reconcileSeconds = new Histogram({
      name: 'gw_operator_reconcile_duration_seconds',
      help: 'Time of one reconcile, by kind.',
      labelNames: ['kind'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [this.registry],
    });
    this.queueDepth = new Gauge({
      name: 'gw_operator_queue_depth',
      help: 'Items waiting, retrying or running in each controller work queue.',
      labelNames: ['kind'],
      registers: [this.registry],
      collect() {
        for (const [kind, depth] of Object.entries(queueDepths())) this.set({ kind }, depth);
      },
    });
    this.leader = new Gauge({
      name: 'gw_operator_leader',
      help: '1 while this instance holds the leader lease.',
      registers: [this.registry],
    });
    this.configMapWrites = new Counter({
      name: 'gw_operator_configmap_writes_total',
      help: 'Compiled ConfigMaps created, updated or deleted.',
      labelNames: ['action'],
      registers: [this.registry],
    });
    this.sessionsRestored = new Counter({
      name: 'gw_operator_sessions_restored_total',
      help: "Keys' sessions found missing from Redis (restarted empty, flushed, evicted) and stored again.",
      registers: [this.registry],
    });
    this.orphanSessionsRemoved = new Counter({
      name: 'gw_operator_orphan_sessions_removed_total',
      help: 'Sessions of Keys deleted without their finalizer (patched away by hand) found in Redis and removed.',
      registers: [this.registry],
    });
    this.webhookReviews = new Counter({
      name: 'gw_operator_webhook_reviews_total',
      help: 'Admission reviews the injection webhook answered, by result: injected, unchanged (nothing to inject), denied (unusable annotations), malformed (not a review).',
      labelNames: ['result'],
      registers: [this.registry],
    });
  }
}
