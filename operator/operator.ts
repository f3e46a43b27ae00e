import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { KubeConfig, KubernetesObject, V1ConfigMap, V1Secret } from '@kubernetes/client-node';
import type { Cluster, Redis } from 'ioredis';
import { MANAGED_BY_SELECTOR } from '../common/compiled-config-map.ts';
import { shareConnections } from '../common/kube-connections.ts';
import type { Logger } from '../common/logger.ts';
import { RedisSessionStore } from '../common/session-store.ts';
import { kinds, type KindName } from '../crds/kinds.ts';
import type { GatewaySettings } from '../crds/settings.ts';
import { releaseOwner } from './runtime/release-owner.ts';
import { ApiDefinitionController } from './controllers/api-definition-controller.ts';
import { CategoryController } from './controllers/category-controller.ts';
import type { Caches, ControllerContext } from './controllers/context.ts';
import { KeyController } from './controllers/key-controller.ts';
import { PolicyController } from './controllers/policy-controller.ts';
import { PortalProductController } from './controllers/portal-product-controller.ts';
import type { OperatorOptions } from './options.ts';
import { Controller } from './runtime/controller.ts';
import { EventRecorder } from './runtime/event-recorder.ts';
import type { GwObject } from './runtime/gw-object.ts';
import { createHealthServer } from './runtime/health-server.ts';
import { InformerSet } from './runtime/informer-set.ts';
import { LeaderElector } from './runtime/leader-election.ts';
import { OperatorMetrics } from './runtime/metrics.ts';
import { createRedis } from './runtime/redis-client.ts';
import { configMapType, customResourceType, secretType } from './runtime/resources.ts';
import { StatusWriter } from './runtime/status.ts';
import { listen, closeServer } from './runtime/listen.ts';
import { WebhookRunner } from './webhook/webhook-runner.ts';
import { enqueueAll, wireWatches, type Queues } from './wiring.ts';

const LEASE_NAME = 'gw-operator-leader';

export interface OperatorDeps {
  kc: KubeConfig;
  log: Logger;
  settings: GatewaySettings;
  /** Default metrics of the process (off when several operators share a test process). */
  processMetrics?: boolean;
}

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
  readonly #caches: Caches;
  readonly #controllers: Controller[];
  readonly #queues: Queues;
  readonly #elector: LeaderElector | undefined;
  readonly #webhook: WebhookRunner | undefined;
  #health: Server | undefined;
  #resync: NodeJS.Timeout | undefined;
  #leading = false;
  #started = false;

  constructor(options: OperatorOptions, deps: OperatorDeps) {
    this.options = options;
    this.#log = deps.log.child({ instance: options.instanceId });
    const kc = shareConnections(deps.kc);
    this.#redis = createRedis(options.redisUrl, this.#log);
    this.#caches = this.#makeCaches(kc);
    this.metrics = new OperatorMetrics(() => Object.fromEntries(this.#controllers.map((c) => [c.kind, c.queue.depth()])), deps.processMetrics ?? true);
    const ctx: ControllerContext = {
      kc,
      log: this.#log,
      caches: this.#caches,
      events: new EventRecorder(kc, options.instanceId, this.#log),
      status: new StatusWriter(kc),
      sessions: new RedisSessionStore(this.#redis),
      settings: deps.settings,
      metrics: this.metrics,
    };
    const queueOptions = { concurrency: options.concurrency, baseDelayMs: 200, maxDelayMs: 30_000 };
    const make = (reconciler: ConstructorParameters<typeof Controller>[0]) => new Controller(reconciler, queueOptions, this.metrics, this.#log);
    const [apis, policies, keys, categories, products] = [
      make(new ApiDefinitionController(ctx)),
      make(new PolicyController(ctx)),
      make(new KeyController(ctx)),
      make(new CategoryController(ctx)),
      make(new PortalProductController(ctx)),
    ];
    this.#controllers = [apis, policies, keys, categories, products];
    this.#queues = {
      apis: (k) => this.#leading && apis.queue.add(k),
      policies: (k) => this.#leading && policies.queue.add(k),
      keys: (k) => this.#leading && keys.queue.add(k),
      categories: (k) => this.#leading && categories.queue.add(k),
      products: (k) => this.#leading && products.queue.add(k),
    };
    wireWatches(this.#caches, this.#queues);
    this.#elector = options.leaderElection
      ? new LeaderElector(
          kc,
          {
            namespace: options.namespace,
            name: LEASE_NAME,
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
    this.#webhook = options.webhook ? new WebhookRunner(kc, options, this.#log) : undefined;
  }

  isLeader(): boolean {
    return this.#leading;
  }

  healthPort(): number | undefined {
    return (this.#health?.address() as AddressInfo | null)?.port;
  }

  async start(): Promise<void> {
    this.#health = createHealthServer({ live: () => this.#started, ready: () => this.#started && (this.#webhook?.serving() ?? true) }, this.metrics.registry);
    await listen(this.#health, this.options.healthListen);
    await Promise.all(Object.values(this.#caches).map((cache: InformerSet<KubernetesObject>) => cache.start()));
    await this.#webhook?.start();
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
    await Promise.all(Object.values(this.#caches).map((cache: InformerSet<KubernetesObject>) => cache.stop()));
    if (this.#health) await closeServer(this.#health);
    this.#redis.disconnect();
    this.#log.info('operator stopped');
  }

  #startLeading(): void {
    this.#leading = true;
    this.metrics.leader.set(1);
    for (const controller of this.#controllers) controller.queue.start();
    enqueueAll(this.#caches, this.#queues);
    const period = this.options.resyncSeconds * 1000;
    this.#resync = setInterval(() => this.#resyncAll(period), period);
    this.#resync.unref();
  }

  #resyncAll(period: number): void {
    const due = new Map<Controller, string[]>(this.#controllers.map((c) => [c, []]));
    const collect = (controller: Controller) => (key: string) => void due.get(controller)?.push(key);
    const [apis, policies, keys, categories, products] = this.#controllers as [Controller, Controller, Controller, Controller, Controller];
    enqueueAll(this.#caches, { apis: collect(apis), policies: collect(policies), keys: collect(keys), categories: collect(categories), products: collect(products) });
    // A little under the period, so an item reconciled just after the last tick is not skipped twice.
    for (const [controller, listed] of due) controller.resync(listed, period * 0.8);
  }

  async #stopLeading(): Promise<void> {
    if (!this.#leading) return;
    this.#leading = false;
    this.metrics.leader.set(0);
    clearInterval(this.#resync);
    await Promise.all(this.#controllers.map((controller) => controller.queue.stop()));
  }

  #makeCaches(kc: KubeConfig): Caches {
    const namespaces = this.options.watchNamespaces;
    const gw = <K extends KindName>(kind: K) => new InformerSet<GwObject<K>>(kc, customResourceType(kc, kinds[kind]), namespaces, this.#log);
    return {
      apis: gw('ApiDefinition'),
      policies: gw('Policy'),
      keys: gw('Key'),
      categories: gw('Category'),
      products: gw('PortalProduct'),
      configMaps: new InformerSet<V1ConfigMap>(kc, configMapType(kc), namespaces, this.#log, MANAGED_BY_SELECTOR),
      secrets: new InformerSet<V1Secret>(kc, secretType(kc), namespaces, this.#log, MANAGED_BY_SELECTOR),
    };
  }
}
