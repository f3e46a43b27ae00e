import { CoreV1Api, makeInformer, type KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import { describeWatchError, RestartingInformer } from '../../common/restarting-informer.ts';
import { API_ID_LABEL, compiledApiId, CONFIG_KEY, MANAGED_BY_SELECTOR, RETAIN_ANNOTATION } from '../../common/compiled-config-map.ts';
import { labelValueFor } from '../../common/label-value.ts';
import type { Logger } from '../../common/logger.ts';
import { byApiId, compiledConfigSchema, type CompiledConfig } from '../../crds/compiled.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { SidecarMetrics } from '../metrics.ts';
import { mergeConfigs, type ConfigProblem, type ConfigSource } from './source.ts';

export interface KubeSourceOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** api_ids this sidecar serves; `'*'` for every API of the namespace. */
  apis: '*' | ReadonlySet<string>;
  defaultSettings: GatewaySettings;
  logger: Logger;
  metrics: SidecarMetrics;
  /** How long an API whose ConfigMap was deleted stays served, unless the ConfigMap comes back (default DELETED_GRACE_MS). */
  deletedGraceMs?: number;
  /** How long the watch may fail before it is reported (default WATCH_FAILING_GRACE_MS). */
  watchFailingGraceMs?: number;
}

/**
 * An API whose ConfigMap was deleted (its ApiDefinition was, with kubectl) stays served this
 * long, then goes: the operator restores a ConfigMap deleted by hand within a second or so,
 * and the API should not blink meanwhile. Like the operator's grace for a retained ConfigMap.
 */
export const DELETED_GRACE_MS = 15_000;

/**
 * A watch failing this long is reported (/readyz problem, gw_config_problems, one error log).
 * An API server restart is over and retried within it (16 s until a new ApiDefinition was
 * served, README.md#reliability-faults-on-a-real-node, then at most 16 s to the next retry),
 * so a control-plane upgrade reports nothing; a refused token is reported within a minute.
 */
export const WATCH_FAILING_GRACE_MS = 60_000;

const watchFailingLabels = { kind: 'ConfigMap', reason: 'WatchFailing' };

interface Entry {
  apiId: string;
  /** The last good config of this API (null until one parsed). */
  config: CompiledConfig | null;
  /** The resourceVersion of the ConfigMap last seen, good or not. */
  version: string | undefined;
  /**
   * The operator keeps the ConfigMap up to date: false once an admin delete marked it retained,
   * or it was deleted, while its API is served on until a reload (mergeConfigs).
   */
  current: boolean;
}

const maxRestartDelayMs = 30_000;

/**
 * Every write gives an object a new resourceVersion, so an entry's last seen one is the config
 * it already took. A reload lists every ConfigMap: parsing them all again held a gateway
 * serving 5,000 APIs for 40 to 60 ms, and gave every API new objects to build routes and
 * limits for.
 */
/** An admin delete marked the ConfigMap: its API is served until a reload, and nothing updates it. */
const retained = (cm: V1ConfigMap): boolean => cm.metadata?.annotations?.[RETAIN_ANNOTATION] === 'true';

function alreadySeen(entry: Entry | undefined, cm: V1ConfigMap): boolean {
  const version = cm.metadata?.resourceVersion;
  return version !== undefined && entry?.version === version;
}

/**
 * Compiled config from the operator's ConfigMaps (one per API) in the pod's namespace,
 * through a client-node informer (list + watch; 410 Gone relists inside the informer,
 * other watch errors restart it here with backoff). An invalid config is refused and the
 * API's last good one kept. A ConfigMap that disappears keeps its API served for
 * DELETED_GRACE_MS (or until `reload()`), unless it comes back; one that disappears while
 * annotated retain-until-reload was deleted by a reload on some sidecar, so every sidecar
 * unloads it at once.
 */
export class KubeConfigSource implements ConfigSource {
  readonly name = 'kubernetes';
  readonly #options: KubeSourceOptions;
  readonly #core: CoreV1Api;
  readonly #entries = new Map<string, Entry>();
  /**
   * The entries' names in the order their APIs are published (by api_id), kept until an
   * entry comes, goes or changes its api_id, so a publish does not sort 5,000 APIs again
   * (docs/architecture.md#performance).
   */
  #order: string[] | null = null;
  readonly #problems = new Map<string, string>();
  /** Served api ids by the label value their ConfigMaps carry (a hash for ids that are no valid label value). */
  readonly #servedByLabel: ReadonlyMap<string, string> | '*';
  readonly #informer: RestartingInformer<V1ConfigMap>;
  #publish: (config: CompiledConfig) => void = () => undefined;
  #publishScheduled = false;
  /** The APIs whose ConfigMap was deleted, by ConfigMap name: each goes when its timer fires, unless the ConfigMap came back. */
  readonly #leaving = new Map<string, NodeJS.Timeout>();
  /** Whether a list of the namespace's ConfigMaps came through: only then is an API missing from it. */
  #listed = false;
  /** Fires once the watch has failed for the grace; set at its first failure since a good list. */
  #failingTimer: NodeJS.Timeout | undefined;
  /** The failure was reported (logged, counted): its end is logged too. */
  #failingReported = false;

  constructor(options: KubeSourceOptions) {
    this.#options = options;
    this.#core = options.kubeConfig.makeApiClient(CoreV1Api);
    this.#servedByLabel = options.apis === '*' ? '*' : new Map([...options.apis].map((apiId) => [labelValueFor(apiId), apiId]));
    const { namespace } = options;
    const informer = makeInformer<V1ConfigMap>(
      options.kubeConfig,
      `/api/v1/namespaces/${namespace}/configmaps`,
      () => this.#core.listNamespacedConfigMap({ namespace, labelSelector: MANAGED_BY_SELECTOR }),
      MANAGED_BY_SELECTOR,
    );
    informer.on('add', (cm) => this.#upsert(cm));
    informer.on('update', (cm) => this.#upsert(cm));
    informer.on('delete', (cm) => this.#remove(cm));
    // After a good list even an empty namespace is a loaded (empty) config.
    this.#informer = new RestartingInformer(informer, {
      log: options.logger,
      what: 'ConfigMap',
      baseMs: 1000,
      maxMs: maxRestartDelayMs,
      onListed: () => {
        this.#listed = true;
        this.#watchBack();
        this.#schedulePublish();
      },
      onFailed: () => this.#watchFailed(),
    });
  }

  async start(publish: (config: CompiledConfig) => void): Promise<void> {
    this.#publish = publish;
    await this.#informer.start();
  }

  #graceMs(): number {
    return this.#options.watchFailingGraceMs ?? WATCH_FAILING_GRACE_MS;
  }

  #watchFailed(): void {
    if (this.#failingTimer !== undefined || this.#failingReported) return;
    this.#failingTimer = setTimeout(() => {
      this.#failingTimer = undefined;
      if (this.#informer.failure() === undefined) return;
      this.#failingReported = true;
      const problem = this.#watchProblem()!;
      this.#options.metrics.configProblems.set(watchFailingLabels, 1);
      this.#options.logger.error({ namespace: this.#options.namespace }, `ConfigMap watch ${problem.reason}`);
    }, this.#graceMs()).unref();
  }

  #watchBack(): void {
    clearTimeout(this.#failingTimer);
    this.#failingTimer = undefined;
    if (!this.#failingReported) return;
    this.#failingReported = false;
    this.#options.metrics.configProblems.remove(watchFailingLabels);
    this.#options.logger.info({ namespace: this.#options.namespace }, 'ConfigMap watch back; config received again');
  }

  /**
   * Reported while the watch has failed for the grace. Not a readiness reason: the gateway
   * serves on with the config it has, and an unready pod would leave its app's Service. A
   * refused token stays refused (a ServiceAccount recreated, as by a reinstall, has a new UID),
   * so that cause says what heals it (README.md#install-with-helm).
   */
  #watchProblem(): ConfigProblem | undefined {
    const failure = this.#informer.failure();
    if (failure === undefined) return undefined;
    const failingMs = Date.now() - failure.sinceMs;
    if (!this.#failingReported && failingMs < this.#graceMs()) return undefined;
    let cause = describeWatchError(failure.error);
    if (cause.startsWith('401 ')) cause += ' (this pod\'s ServiceAccount token is refused: was its ServiceAccount deleted or recreated? restart the pod)';
    const serving = this.#listed ? `serving the config as of ${new Date(failure.sinceMs).toISOString()}` : 'no config received yet';
    return { subject: `ConfigMap watch (namespace ${this.#options.namespace})`, reason: `failing for ${Math.round(failingMs / 1000)} s: ${cause}; ${serving}` };
  }

  #serves(cm: V1ConfigMap): string | null {
    const label = cm.metadata?.labels?.[API_ID_LABEL];
    if (!label) return null;
    return this.#servedByLabel === '*' ? label : (this.#servedByLabel.get(label) ?? null);
  }

  /**
   * The id logs, metrics and problems name. GW_APIS gives it; under `*` only the label
   * selected the ConfigMap, and a label holds a hash of an id too long for it, so the id
   * comes from the config (or, when that is not even JSON, from its last good one).
   */
  #apiIdOf(cm: V1ConfigMap, served: string): string {
    if (this.#servedByLabel !== '*') return served;
    return compiledApiId(cm.data?.[CONFIG_KEY]) ?? this.#entries.get(cm.metadata?.name ?? '')?.apiId ?? served;
  }

  #parse(cm: V1ConfigMap, apiId: string): CompiledConfig | null {
    const name = cm.metadata?.name ?? '';
    try {
      const parsed = compiledConfigSchema.safeParse(JSON.parse(cm.data?.[CONFIG_KEY] ?? ''));
      if (parsed.success) return parsed.data;
      this.#refuse(apiId, name, parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
    } catch (err) {
      this.#refuse(apiId, name, (err as Error).message);
    }
    return null;
  }

  #refuse(apiId: string, configMap: string, reason: string): void {
    this.#problems.set(apiId, reason);
    this.#countProblems();
    this.#options.metrics.configReloadErrors.inc({ api_id: apiId });
    this.#options.logger.error({ apiId, configMap, reason }, 'invalid compiled config refused; keeping the last good one');
  }

  #countProblems(): void {
    this.#options.metrics.configProblems.set({ kind: 'ConfigMap', reason: 'InvalidConfig' }, this.#problems.size);
  }

  #upsert(cm: V1ConfigMap): void {
    const served = this.#serves(cm);
    const name = cm.metadata?.name;
    if (served === null || name === undefined) return;
    const previous = this.#entries.get(name);
    if (alreadySeen(previous, cm)) return;
    this.#stay(name);
    const apiId = this.#apiIdOf(cm, served);
    const config = this.#parse(cm, apiId);
    if (config !== null && this.#problems.delete(apiId)) this.#countProblems();
    if (previous?.apiId !== apiId) this.#order = null;
    this.#entries.set(name, { apiId, config: config ?? previous?.config ?? null, version: cm.metadata?.resourceVersion, current: !retained(cm) });
    if (config !== null) this.#schedulePublish();
  }

  #remove(cm: V1ConfigMap): void {
    const name = cm.metadata?.name;
    const entry = name === undefined ? undefined : this.#entries.get(name);
    if (name === undefined || entry === undefined) return;
    if (retained(cm)) {
      this.#forget(name);
      this.#schedulePublish();
    } else {
      // Left in #entries for the grace: a ConfigMap deleted by hand comes back from the operator (docs/behaviour.md#api-states).
      const graceMs = this.#options.deletedGraceMs ?? DELETED_GRACE_MS;
      this.#options.logger.info({ apiId: entry.apiId, configMap: name, graceMs }, 'ConfigMap deleted; API unloaded after the grace unless it comes back');
      this.#stay(name);
      this.#leaving.set(name, setTimeout(() => {
        this.#leaving.delete(name);
        if (this.#entries.get(name) !== entry) return;
        this.#forget(name);
        this.#schedulePublish();
      }, graceMs).unref());
      if (entry.current) {
        entry.current = false;
        this.#schedulePublish();
      }
    }
  }

  /** The API of `name` is not leaving (its ConfigMap is back, or the source closes). */
  #stay(name: string): void {
    clearTimeout(this.#leaving.get(name));
    this.#leaving.delete(name);
  }

  /** Many ConfigMaps arrive together on a (re)list: publish once after them. */
  #schedulePublish(): void {
    if (this.#publishScheduled) return;
    this.#publishScheduled = true;
    setImmediate(() => {
      this.#publishScheduled = false;
      this.#publishNow();
    });
  }

  #forget(name: string): void {
    if (this.#entries.delete(name)) this.#order = null;
  }

  #publishNow(): void {
    const entries = this.#entries;
    this.#order ??= [...entries.keys()].sort((a, b) => byApiId(entries.get(a)!.apiId, entries.get(b)!.apiId));
    const parts: CompiledConfig[] = [];
    const outdated = new Set<CompiledConfig>();
    for (const name of this.#order) {
      const { config, current } = entries.get(name)!;
      if (config === null) continue;
      parts.push(config);
      if (!current) outdated.add(config);
    }
    this.#publish(mergeConfigs(parts, this.#options.defaultSettings, (part) => !outdated.has(part)));
  }

  /** docs/behaviour.md#api-states reload: what is in the API server now is what is served; gone APIs are unloaded. */
  async reload(): Promise<void> {
    const list = await this.#core.listNamespacedConfigMap({
      namespace: this.#options.namespace,
      labelSelector: MANAGED_BY_SELECTOR,
    });
    const present = new Set<string>();
    for (const cm of list.items) {
      const name = cm.metadata?.name;
      if (name === undefined || this.#serves(cm) === null) continue;
      present.add(name);
      this.#upsert(cm);
    }
    for (const name of [...this.#entries.keys()]) {
      if (present.has(name)) continue;
      this.#stay(name);
      this.#forget(name);
    }
    this.#publishNow();
  }

  problems(): ConfigProblem[] {
    const problems = [...this.#problems].map(([apiId, reason]) => ({ subject: `api ${apiId}`, reason }));
    const watch = this.#watchProblem();
    return [...problems, ...this.#missing(), ...(watch === undefined ? [] : [watch])];
  }

  /**
   * The APIs GW_APIS names that no compiled ConfigMap of the namespace holds: a misspelt api_id
   * would otherwise leave a ready gateway answering 404 with nothing said. (The operator may not
   * have compiled a new API yet: the problem goes as its ConfigMap comes.)
   */
  #missing(): ConfigProblem[] {
    if (this.#servedByLabel === '*' || !this.#listed) return [];
    const held = new Set([...this.#entries.values()].map((entry) => entry.apiId));
    return [...this.#servedByLabel.values()]
      .filter((apiId) => !held.has(apiId))
      .map((apiId) => ({
        subject: `api ${apiId}`,
        reason: `GW_APIS names it, and no compiled ConfigMap in namespace ${this.#options.namespace} holds it: is there an ApiDefinition with this api_id (the operator compiles it within seconds)?`,
      }));
  }

  async stop(): Promise<void> {
    for (const name of [...this.#leaving.keys()]) this.#stay(name);
    clearTimeout(this.#failingTimer);
    await this.#informer.stop();
  }
}
