import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Cluster, Redis } from 'ioredis';
import { MANAGED_BY_SELECTOR } from '../common/compiled-config-map.ts';
import { shareConnections } from '../common/kube-connections.ts';
import type { Logger } from '../common/logger.ts';
import { RedisSessionStore } from '../common/session-store.ts';
import { kinds, type KindName } from '../crds/kinds.ts';
import type { GatewaySettings } from '../crds/settings.ts';
import { KubeConfigMapWriter } from './config/config-map-writer.ts';
import { keepOnlyDataDigest } from './config/config-map.ts';
import { ApiDefinitionController } from './controllers/api-definition-controller.ts';
import { CategoryController } from './controllers/category-controller.ts';
import { indexCaches, type Caches, type ControllerContext } from './controllers/context.ts';
import { KeyController } from './controllers/key-controller.ts';
import { PolicyController } from './controllers/policy-controller.ts';
import { PortalProductController } from './controllers/portal-product-controller.ts';
import { Controller, type ControllerOptions, type KindController } from './kit/controller.ts';
import type { Source } from './kit/watch.ts';
import { KubeKeySecrets } from './keys/key-secrets.ts';
import { listenerOptionNames, type OperatorOptions } from './options.ts';
import { KubeEventRecorder } from './runtime/event-recorder.ts';
import { KubeFinalizerWriter } from './runtime/finalizer-writer.ts';
import { OwnWrites } from './kit/own-writes.ts';
import type { GwObject } from './runtime/gw-object.ts';
import { createServer } from 'node:http';
import { createHealthHandler, type Readiness } from '../common/health.ts';
import { metricsOf } from '../common/metrics-text.ts';
import { InformerSet } from './runtime/informer-set.ts';
import { LeaderElector, leaderOnlySessions } from './runtime/leader-election.ts';
import { drain, listen, listenNamed } from '../common/listen.ts';
import { OperatorMetrics } from './runtime/metrics.ts';
import { createRedis, whenReady } from './runtime/redis-client.ts';
import { releaseNames } from './runtime/release-names.ts';
import { releaseOwner } from './runtime/release-owner.ts';
import { keepOnlyKeyHash } from './keys/key-secrets.ts';
import { OrphanSessionSweeper } from './keys/orphan-sessions.ts';
import { configMapType, customResourceType, secretType } from './runtime/resources.ts';
import { KubeStatusWriter } from './runtime/status.ts';
import { WebhookRunner } from './webhook/webhook-runner.ts';

/** Longest a reconcile may run: a deposed leader stops writing within this, however stuck a call is. */
const RECONCILE_TIMEOUT_MS = 30_000;
/** How long a starting operator waits for Redis before reconciling (operator/runtime/redis-client.ts#whenReady). */
const REDIS_START_WAIT_MS = 5_000;

export interface OperatorDeps {
  kc: KubeConfig;
  log: Logger;
  settings: GatewaySettings;
  /** Default metrics of the process (off when several operators share a test process). */
  processMetrics?: boolean;
}

/** The informers behind the caches: what the operator starts and stops. */
type Informers = { [P in keyof Caches]: Caches[P] extends Source<infer T> ? InformerSet<T> : never };

/**
 * One operator instance: informer caches of every kind, one controller per kind behind
 * a work queue, leader election (only the leader reconciles; caches stay warm on every
 * replica for a fast take-over), the injection webhook (served by every replica), and
 * the health/metrics listener.
 */
export class Operator {
  readonly options: OperatorOptions;
  readonly metrics: OperatorMetrics;
  readonly #log: Logger;
  readonly #redis: Redis | Cluster;
  readonly #informers: Informers;
  readonly #controllers: Record<KindName, Controller>;
  readonly #elector: LeaderElector | undefined;
  readonly #webhook: WebhookRunner | undefined;
  readonly #orphanSessions: OrphanSessionSweeper;
  #health: Server | undefined;
  #resync: NodeJS.Timeout | undefined;
  #leading = false;
  #started = false;
  readonly #events: KubeEventRecorder;

  constructor(options: OperatorOptions, deps: OperatorDeps) {
    this.options = options;
    this.#log = deps.log.child({ instance: options.instanceId });
    const kc = shareConnections(deps.kc);
    this.#redis = createRedis(options.redisUrl, this.#log);
    const ownWrites = new OwnWrites();
    this.#informers = this.#makeInformers(kc, ownWrites);
    this.#events = new KubeEventRecorder(kc, options.instanceId, this.#log);
    this.metrics = new OperatorMetrics(() => Object.fromEntries(Object.values(this.#controllers).map((c) => [c.kind, c.depth()])), deps.processMetrics ?? true);
    // Without election this process always leads; with it, only while its lease is fresh.
    const holdsLease = (): boolean => this.#elector?.holdsLease() ?? this.#leading;
    const ctx: ControllerContext = {
      log: this.#log,
      caches: this.#informers,
      indexes: indexCaches(this.#informers),
      status: new KubeStatusWriter(kc, ownWrites),
      events: this.#events,
      finalizers: new KubeFinalizerWriter(kc, ownWrites),
      configMaps: new KubeConfigMapWriter(kc, ownWrites),
      keySecrets: new KubeKeySecrets(kc, ownWrites),
      sessions: leaderOnlySessions(new RedisSessionStore(this.#redis), holdsLease),
      settings: deps.settings,
      metrics: this.metrics,
    };
    this.#orphanSessions = new OrphanSessionSweeper({
      redis: this.#redis,
      keys: this.#informers.keys,
      keysByHash: ctx.indexes.keysByHash,
      synced: () => this.#informers.keys.synced(),
      sessions: ctx.sessions,
      watchNamespaces: options.watchNamespaces,
      removed: this.metrics.orphanSessionsRemoved,
      log: this.#log,
    });
    const controllerOptions: ControllerOptions = { concurrency: options.concurrency, baseDelayMs: 200, maxDelayMs: 30_000, timeoutMs: RECONCILE_TIMEOUT_MS, ownWrites, mayReconcile: holdsLease };
    const controller = (reconciler: KindController) => new Controller(reconciler, controllerOptions, this.metrics, this.#log);
    this.#controllers = {
      ApiDefinition: controller(new ApiDefinitionController(ctx)),
      Policy: controller(new PolicyController(ctx)),
      Key: controller(new KeyController(ctx)),
      Category: controller(new CategoryController(ctx)),
      PortalProduct: controller(new PortalProductController(ctx)),
    };
    this.#elector = options.leaderElection
      ? new LeaderElector(
          kc,
          {
            namespace: options.namespace,
            name: releaseNames(options.releaseName).lease,
            identity: options.instanceId,
            leaseDurationSeconds: options.leaseDurationSeconds,
            retryPeriodMs: Math.max(200, (options.leaseDurationSeconds * 1000) / 5),
            onStartedLeading: () => this.#startLeading(),
            onStoppedLeading: () => void this.#stopLeading(),
            owner: () => releaseOwner(kc, options.namespace, options.webhookService),
          },
          this.#log,
        )
      : undefined;
    this.#webhook = options.webhook ? new WebhookRunner(kc, options, this.#log, (result) => this.metrics.webhookReviews.inc({ result })) : undefined;
  }

  isLeader(): boolean {
    return this.#leading;
  }

  #readiness(): Readiness {
    const reasons = [
      // The first lists are tried before start() returns, but one that failed (an API server not
      // reachable yet) is retried in the background: until it succeeds the caches miss objects.
      ...(this.#started && Object.values(this.#informers).every((informers) => informers.synced()) ? [] : ['caches not synced']),
      ...(this.#webhook && !this.#webhook.serving() ? ['webhook not serving'] : []),
    ];
    return { ready: reasons.length === 0, reasons, problems: [] };
  }

  healthPort(): number | undefined {
    return (this.#health?.address() as AddressInfo | null)?.port;
  }

  async start(): Promise<void> {
    this.#health = createServer(createHealthHandler(metricsOf(this.metrics.registry), { live: () => this.#started, readiness: () => this.#readiness() }));
    await listenNamed(listenerOptionNames.health, listen(this.#health, this.options.healthListen));
    await Promise.all(Object.values(this.#informers).map((informers) => informers.start()));
    await this.#webhook?.start();
    if (!(await whenReady(this.#redis, REDIS_START_WAIT_MS))) {
      this.#log.warn({ waitedMs: REDIS_START_WAIT_MS }, 'Redis not reachable yet; reconciling anyway: Keys report SessionStoreUnavailable until it is');
    }
    this.#started = true;
    if (this.#elector) this.#elector.start();
    else this.#startLeading();
    this.#log.info({ namespaces: this.options.watchNamespaces.length > 0 ? this.options.watchNamespaces : 'all' }, 'operator started');
  }

  /** Graceful: release the lease (a successor takes over at once), finish running reconciles, stop watches, close listeners. */
  async stop(): Promise<void> {
    this.#started = false;
    await this.#elector?.stop();
    await this.#stopLeading();
    await this.#webhook?.stop();
    await Promise.all(Object.values(this.#informers).map((informers) => informers.stop()));
    await this.#events.close();
    if (this.#health) await drain(this.#health, 0);
    this.#redis.disconnect();
    this.#log.info('operator stopped');
  }

  #startLeading(): void {
    this.#leading = true;
    this.metrics.leader.set(1);
    for (const controller of Object.values(this.#controllers)) controller.start();
    const period = this.options.resyncSeconds * 1000;
    // Each pass is spread over half the period; an item's age is checked against the other half,
    // so everything the last pass revisited is stale again at the next tick and none is skipped:
    // drift is corrected within one and a half periods.
    this.#resync = setInterval(() => Object.values(this.#controllers).forEach((controller) => controller.resync(period / 2, period / 2)), period);
    this.#resync.unref();
    this.#orphanSessions.start(this.options.orphanSessionSweepSeconds * 1000);
  }

  async #stopLeading(): Promise<void> {
    if (!this.#leading) return;
    this.#leading = false;
    this.metrics.leader.set(0);
    clearInterval(this.#resync);
    this.#orphanSessions.stop();
    await Promise.all(Object.values(this.#controllers).map((controller) => controller.stop()));
  }

  #makeInformers(kc: KubeConfig, ownWrites: OwnWrites): Informers {
    const namespaces = this.options.watchNamespaces;
    const gw = <K extends KindName>(kind: K) => new InformerSet<GwObject<K>>(kc, customResourceType(kc, kinds[kind]), namespaces, this.#log, { ownWrites });
    return {
      apis: gw('ApiDefinition'),
      policies: gw('Policy'),
      keys: gw('Key'),
      categories: gw('Category'),
      products: gw('PortalProduct'),
      configMaps: new InformerSet(kc, configMapType(kc), namespaces, this.#log, { labelSelector: MANAGED_BY_SELECTOR, prune: keepOnlyDataDigest, ownWrites }),
      secrets: new InformerSet(kc, secretType(kc), namespaces, this.#log, { labelSelector: MANAGED_BY_SELECTOR, prune: keepOnlyKeyHash, ownWrites }),
    };
  }
}
