import type { Logger } from '../../common/logger.ts';
import { resolveSettings, type LocalSettings } from '../../common/settings-loader.ts';
import type { CompiledApi, CompiledConfig } from '../../crds/compiled.ts';
import { RouteTable, type ShadowedApi } from '../gateway/routes.ts';
import type { GatewayState } from '../gateway/gateway.ts';
import type { LimitEngine } from '../limits/types.ts';
import type { SidecarMetrics } from '../metrics.ts';
import type { ConfigProblem, ConfigSource } from './source.ts';

export interface ConfigRuntimeDeps {
  source: ConfigSource;
  local: LocalSettings;
  engine: LimitEngine;
  logger: Logger;
  metrics: SidecarMetrics;
  /** Told of every new state once it is live (the forwarders release origins no route reaches). */
  onSwap?: (state: GatewayState) => void;
}

/**
 * The config a sidecar is running: what its source last published, with the sidecar's
 * own settings layered on top, turned into the gateway's request-path state (routes
 * precomputed) and handed to the limit engine. The admin operations read `apis()` and
 * call `reload()` (docs/behaviour.md#api-states: a deleted API stays served until a reload).
 */
export class ConfigRuntime {
  readonly #deps: ConfigRuntimeDeps;
  #config: CompiledConfig;
  #state: GatewayState;

  constructor(deps: ConfigRuntimeDeps) {
    this.#deps = deps;
    const settings = resolveSettings(undefined, deps.local);
    this.#config = { version: 1, settings, apis: [], policies: {} };
    this.#state = { loaded: false, routes: new RouteTable([]), settings, policies: {} };
  }

  start(): Promise<void> {
    return this.#deps.source.start((config) => this.#apply(config));
  }

  #apply(published: CompiledConfig): void {
    const { logger, metrics, engine, source } = this.#deps;
    try {
      const settings = resolveSettings(published.settings, this.#deps.local);
      const config: CompiledConfig = { ...published, settings };
      const routes = new RouteTable(config.apis, this.#state.routes);
      if (routes.shadowed !== this.#state.routes.shadowed) this.#reportShadowed(routes.shadowed);
      engine.updateConfig(config);
      this.#config = config;
      this.#state = { loaded: true, routes, settings, policies: config.policies };
      this.#deps.onSwap?.(this.#state);
      metrics.configReloads.inc({ source: source.name, result: 'ok' });
      logger.info({ apis: config.apis.map((a) => a.api_id), source: source.name }, 'config loaded');
    } catch (err) {
      metrics.configReloads.inc({ source: source.name, result: 'error' });
      logger.error({ err, source: source.name }, 'config refused; keeping the last good one');
    }
  }

  /** The request path's view; read once per request. */
  readonly state = (): GatewayState => this.#state;

  apis(): readonly CompiledApi[] {
    return this.#config.apis;
  }

  /** True once a first config has been loaded. */
  get loaded(): boolean {
    return this.#state.loaded;
  }

  reload(): Promise<void> {
    return this.#deps.source.reload();
  }

  /**
   * Two APIs this gateway loads on one listen path: the one loaded second is never reached. In
   * a cluster that is no fault of either resource (sidecars of different apps each load their
   * own API on `/`), so it is this gateway's to say, on /readyz, in the log and in
   * `gw_config_problems`.
   */
  #reportShadowed(shadowed: readonly ShadowedApi[]): void {
    const labels = { kind: 'ApiDefinition', reason: 'ListenPathTaken' };
    if (shadowed.length > 0) this.#deps.metrics.configProblems.set(labels, shadowed.length);
    else this.#deps.metrics.configProblems.remove(labels);
    for (const { api, by } of shadowed) this.#deps.logger.warn({ api: api.api_id, servedInstead: by.api_id, listenPath: api.listen_path }, 'API never reached: another API has its listen path');
  }

  /** What the source refused or cannot receive (the APIs keep their last good config), and the APIs no request reaches. */
  problems(): ConfigProblem[] {
    const shadowed = this.#state.routes.shadowed.map(({ api, by }) => {
      const file = this.#deps.source.fileOf?.(api.source);
      return {
        subject: `${api.source.kind} ${api.source.namespace}/${api.source.name}`,
        reason: `listen path ${api.listen_path} is served by ${by.source.kind} ${by.source.namespace}/${by.source.name} (its api_id ${by.api_id} comes first); this API is never reached`,
        ...(file === undefined ? {} : { file }),
      };
    });
    return [...this.#deps.source.problems(), ...shadowed];
  }

  stop(): Promise<void> {
    return this.#deps.source.stop();
  }
}
