import type { RequestListener, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Cluster, Redis } from 'ioredis';
import { loadKubeConfig } from '../common/kube.ts';
import { shareConnections } from '../common/kube-connections.ts';
import { createLogger, type Logger } from '../common/logger.ts';
import { MemorySessionStore, RedisSessionStore, type SessionStore } from '../common/session-store.ts';
import { loadLocalSettings, resolveSettings, type LocalSettings } from '../common/settings-loader.ts';
import type { CompiledApi } from '../crds/compiled.ts';
import type { GatewaySettings } from '../crds/settings.ts';
import { SessionCache } from './auth/session-cache.ts';
import { reportedSessionCache } from './auth/session-changes.ts';
import { listenerOptionNames, PROXY_OFF, TLS_LISTENERS, type SidecarOptions, type TlsListener } from './cli.ts';
import { createAdminHandler, KubernetesBearerAuthenticator, StaticBearerAuthenticator } from './admin/index.ts';
import { adminRefusalShape } from './admin/responses.ts';
import { FolderConfigSource } from './config/folder-source.ts';
import { KubeConfigSource } from './config/kube-source.ts';
import { ConfigRuntime } from './config/runtime.ts';
import type { ConfigSource } from './config/source.ts';
import { KubeEventSink } from './events/kube-event-sink.ts';
import { LogEventSink } from './events/log-event-sink.ts';
import { Gateway } from './gateway/gateway.ts';
import { answersInFlight, boundedServer, boundedUpgrade } from './bounded-server.ts';
import { createHealthHandler, type Readiness } from '../common/health.ts';
import { metricsOf } from '../common/metrics-text.ts';
import { createLimitBackends } from './limits/backends.ts';
import { createLimitEngine } from './limits/engine.ts';
import { liveGateways } from './limits/heartbeat.ts';
import { StreamLimiters, streamResourcesOf, type StreamSlots } from './limits/stream-limiter.ts';
import type { LimitEngine, SmoothingEvent, SmoothingEventSink } from './limits/types.ts';
import { drain, listen, listenNamed, urlOf } from '../common/listen.ts';
import { createSidecarMetrics, retainApiSeries, statusClass, type SidecarMetrics } from './metrics.ts';
import type { GatewayError } from './http/errors.ts';
import { HttpProxyForwarder } from './proxy/http-proxy-forwarder.ts';
import { UndiciForwarder } from './proxy/undici-forwarder.ts';
import { createRedis } from './redis.ts';
import { ReloadingTlsFiles } from '../common/tls-files.ts';
import { FolderResourceStore } from './resources/folder-store.ts';
import { KubernetesResourceStore } from './resources/kubernetes-store.ts';
import type { NewKey } from './resources/types.ts';
import { warmUp } from './warm-up.ts';

/** What a caller (main, the demo, tests) may supply instead of the defaults. */
export interface SidecarOverrides {
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  kubeConfig?: KubeConfig;
  /** A config source other than the ones the options select. */
  source?: ConfigSource;
  /** Time allowed for in-flight requests on close. */
  drainMs?: number;
  /** Time a client has to send its request headers (default LISTENER_BOUNDS.headersTimeoutMs). */
  headersTimeoutMs?: number;
  /** Set when this process is one worker of several (sidecar/workers/worker.ts). */
  worker?: WorkerRole;
}

/**
 * One worker of a gateway run as several processes (docs/architecture.md#workers). The
 * primary serves health and metrics; worker 0 alone serves the admin listener, so admin
 * writes to a folder stay serialized in one process; every worker serves the proxy.
 */
export interface WorkerRole {
  index: number;
  /** The other workers' instance ids: DRL counts them as gateways from the start. */
  siblings: readonly string[];
  /** What one worker does that every other worker must do too, run on them through the primary. */
  others: {
    reload(release: boolean): Promise<void>;
    retain(apiId: string): Promise<void>;
    /** The APIs the other workers retain (deleted, served until the next reload): a worker started again serves them too. */
    retainedApis(): Promise<CompiledApi[]>;
    allowance(event: SmoothingEvent): void;
  };
  /** The stream rate-limit resources, whose slots the primary gives for every worker. */
  streams: StreamSlots;
}

/** Each URL is 'off' where this process does not listen (a worker: health always, admin but in worker 0). */
export interface RunningSidecar {
  proxyUrl: string;
  adminUrl: string;
  healthUrl: string;
  runtime: ConfigRuntime;
  metrics: SidecarMetrics;
  readiness(): Readiness;
  /** Where the admin operations write; a worker keeps its folder's retained APIs in step with worker 0's. */
  resources: KubernetesResourceStore | FolderResourceStore;
  close(): Promise<void>;
}

interface Parts {
  logger: Logger;
  metrics: SidecarMetrics;
  redis: Redis | Cluster | undefined;
  /** The last error of the Redis connection since it was last ready, named by /readyz. */
  redisError: () => Error | undefined;
  sessions: SessionStore;
  kubeConfig: KubeConfig | undefined;
  events: SmoothingEventSink & { close?: () => Promise<void> };
  engine: LimitEngine;
  /** What the admin operations write: the cluster's resources, or the `--config` folder. */
  resources: KubernetesResourceStore | FolderResourceStore;
}

/** The gateway's session cache, told of session changes where Redis can report them (docs/architecture.md#sessions). */
function cachedSessions({ sessions, redis, logger, metrics }: Parts, size: number, settings: () => GatewaySettings, source: ConfigSource): { cache: SessionCache; close: () => Promise<void> } {
  if (redis === undefined) return { cache: new SessionCache(sessions, { size }), close: () => Promise.resolve() };
  const { cache, changes } = reportedSessionCache(redis, {
    size,
    // A folder Key's session lost with a flushed Redis is answered from the folder while it is written back.
    absent: source instanceof FolderConfigSource ? (keyHash) => source.sessionLost(keyHash) : undefined,
    logger,
    tracked: metrics.sessionChangesTracked,
    // Failing open, a key read lately keeps working while Redis is away (docs/behaviour.md#gateway-answers).
    servesStale: () => settings().redis_failure_mode === 'open',
    readTimeoutMs: () => settings().redis_timeout_ms,
  });
  return { cache, close: () => changes.close() };
}

/** The connection to `GW_REDIS_URL`; without one, the stores are in memory (one process). */
function connectRedis(options: SidecarOptions, settings: GatewaySettings, logger: Logger, metrics: SidecarMetrics): Pick<Parts, 'redis' | 'redisError'> {
  if (!options.redisUrl) return { redis: undefined, redisError: () => undefined };
  const { client, lastError } = createRedis(options.redisUrl, settings.redis_timeout_ms, logger, metrics);
  return { redis: client, redisError: lastError };
}

function buildParts(options: SidecarOptions, overrides: SidecarOverrides, settings: GatewaySettings): Parts {
  const logger = overrides.logger ?? createLogger('gw-sidecar');
  const metrics = createSidecarMetrics();
  const { redis, redisError } = connectRedis(options, settings, logger, metrics);
  const sessions = redis ? new RedisSessionStore(redis) : new MemorySessionStore();
  const loaded = options.configDir ? overrides.kubeConfig : (overrides.kubeConfig ?? loadKubeConfig('gw-sidecar', options.kubeconfig));
  // Every Kubernetes client of the sidecar is made from this one KubeConfig: one agent, reused connections.
  const kubeConfig = loaded && shareConnections(loaded);
  const sink: Parts['events'] = kubeConfig
    ? new KubeEventSink({ kubeConfig, instanceId: options.instanceId, logger, metrics })
    : new LogEventSink(logger, metrics);
  const worker = overrides.worker;
  // The primary keeps the allowance gauge of a gateway of several workers (docs/architecture.md#workers).
  const events: Parts['events'] = worker
    ? { emit: (event) => (sink.emit(event), worker.others.allowance(event)), close: () => sink.close?.() ?? Promise.resolve() }
    : sink;
  const engine = createLimitEngine({
    config: { version: 1, settings, apis: [], policies: {} },
    backends: createLimitBackends({
      redis,
      instanceId: options.instanceId,
      // A gateway that proxies nothing takes no share of a DRL limit from those that do.
      drlPeer: options.listen !== PROXY_OFF,
      siblings: worker?.siblings,
      logger,
      registry: metrics.registry,
    }),
    events,
    logger,
    registry: metrics.registry,
  });
  const inCluster = options.configDir === undefined && kubeConfig !== undefined;
  const lateCreateFailed = (err: unknown, key: NewKey): void =>
    logger.error({ err, keyName: key.name, namespace: key.namespace }, 'create key: could not delete a Key whose create landed after its deadline');
  const resources =
    inCluster && kubeConfig
      ? new KubernetesResourceStore(kubeConfig, [options.namespace], { lateCreateFailed })
      : new FolderResourceStore(options.configDir ?? '.', options.namespace, overrides.worker && ((apiId) => overrides.worker!.others.retain(apiId)));
  return { logger, metrics, redis, redisError, sessions, kubeConfig, events, engine, resources };
}

/**
 * A worker of a folder-mode gateway that starts while the others retain deleted APIs (it was
 * started again) retains them too, so that every worker serves the same APIs until the next
 * reload. None when the others cannot tell: the worker then serves what its folder holds.
 */
async function retainedByOtherWorkers(options: SidecarOptions, overrides: SidecarOverrides, parts: Parts): Promise<CompiledApi[]> {
  const { worker } = overrides;
  if (worker === undefined || options.configDir === undefined || overrides.source || !(parts.resources instanceof FolderResourceStore)) return [];
  try {
    const apis = await worker.others.retainedApis();
    for (const api of apis) parts.resources.retain(api.api_id);
    return apis;
  } catch (err) {
    parts.logger.warn({ err }, 'the other workers did not tell the APIs they retain: serving what the folder holds');
    return [];
  }
}

/** A connection state with the error that keeps it there, which tells a wrong password or CA from an outage. */
function withCause(state: string, err: Error | undefined): string {
  return err ? `${state}: ${err.message}` : state;
}

/** Calls `returned` each time Redis is ready again after having been lost (not on its first connection). */
/** `returned` runs each time Redis is ready again; `first` tells the first time it is ready. */
function whenRedisReady({ redis, logger }: Parts, returned: (first: boolean) => Promise<void>): void {
  let connectedBefore = false;
  redis?.on('ready', () => {
    const first = !connectedBefore;
    connectedBefore = true;
    returned(first).catch((err: unknown) => logger.error({ err }, "Keys' sessions could not be checked after Redis returned"));
  });
}

function selectSource(options: SidecarOptions, overrides: SidecarOverrides, parts: Parts, settings: GatewaySettings, retainedElsewhere: readonly CompiledApi[]): ConfigSource {
  if (overrides.source) return overrides.source;
  if (options.configDir) {
    const { sessions, logger, metrics, resources } = parts;
    // APIs deleted through the admin operations stay served until a reload, even as the watched folder is re-read.
    const retainedApis = resources instanceof FolderResourceStore ? () => resources.deletedApiIds() : undefined;
    const source = new FolderConfigSource({ dir: options.configDir, defaultNamespace: options.namespace, sessions, logger, metrics, retainedApis, retainedElsewhere });
    if (resources instanceof FolderResourceStore) resources.keyCreated = (hash) => source.keyCreated(hash);
    whenRedisReady(parts, (first) => (first ? source.storeReached() : source.storeReturned()));
    return source;
  }
  if (parts.kubeConfig === undefined) throw new Error('no config source: give --config DIR or a kubeconfig');
  return new KubeConfigSource({
    kubeConfig: parts.kubeConfig,
    namespace: options.namespace,
    apis: options.apis,
    defaultSettings: settings,
    logger: parts.logger,
    metrics: parts.metrics,
  });
}

function adminHandler(options: SidecarOptions, overrides: SidecarOverrides, parts: Parts, runtime: ConfigRuntime): RequestListener {
  const { kubeConfig, logger, metrics, sessions, resources, redis } = parts;
  const inCluster = options.configDir === undefined && kubeConfig !== undefined;
  const others = overrides.worker?.others;
  return createAdminHandler({
    resources,
    sessions,
    runtime: {
      reload: async () => {
        await runtime.reload();
        await others?.reload(true);
      },
    },
    limits: { apis: () => runtime.apis(), state: runtime.state, engine: parts.engine },
    gateways: {
      live: (apiIds) => (redis ? liveGateways(redis, apiIds, Date.now()) : Promise.resolve(new Map(apiIds.map((id) => [id, [options.instanceId]])))),
    },
    auth: {
      adminSecret: options.adminSecret ?? '',
      portalSecret: options.portalSecret ?? '',
      bearer: inCluster && kubeConfig ? new KubernetesBearerAuthenticator(kubeConfig) : new StaticBearerAuthenticator(options.bearerTokens),
    },
    logger,
    namespace: options.namespace,
    registry: metrics.registry,
  }) as RequestListener;
}

const TLS_LISTENERS_ALL: ReadonlySet<TlsListener> = new Set(TLS_LISTENERS);

/** How often the TLS files are checked for a renewed certificate (the kubelet refreshes a Secret volume within about a minute). */
const TLS_POLL_MS = 2000;

function openTls(options: SidecarOptions, logger: Logger): Promise<ReloadingTlsFiles | undefined> {
  if (options.tlsCertFile === undefined || options.tlsKeyFile === undefined) return Promise.resolve(undefined);
  return ReloadingTlsFiles.open(options.tlsCertFile, options.tlsKeyFile, logger);
}

/**
 * The listeners this process serves. Workers bind their own sockets: the kernel spreads
 * connections over the proxy's (SO_REUSEPORT), and a worker that dies takes only its own
 * queue down instead of stalling connections the primary was handing it.
 */
function listenAll(options: SidecarOptions, worker: WorkerRole | undefined, servers: Record<'proxy' | 'admin' | 'health', Server>): Promise<(AddressInfo | undefined)[]> {
  return Promise.all([
    options.listen === PROXY_OFF ? undefined : listenNamed(listenerOptionNames.proxy, listen(servers.proxy, options.listen, worker && { exclusive: true, reusePort: true })),
    worker && worker.index > 0 ? undefined : listenNamed(listenerOptionNames.admin, listen(servers.admin, options.adminListen, worker && { exclusive: true })),
    worker ? undefined : listenNamed(listenerOptionNames.health, listen(servers.health, options.healthListen)),
  ]);
}

/**
 * An empty secret authenticates nobody (sidecar/admin/secret.ts), so the operations behind it
 * refuse every call: said once at start, where a new user looks first.
 */
function warnUnsetSecrets(options: SidecarOptions, logger: Logger): void {
  const unset = [
    ...(options.adminSecret ? [] : ['GW_ADMIN_SECRET (Admin-Auth, X-GW-Authorization: create key, delete API, reload, key limits, gateways): 403']),
    ...(options.portalSecret ? [] : ['GW_PORTAL_SECRET (the portal Authorization header: attach tag): 401']),
  ];
  if (unset.length > 0) logger.warn({ unset }, 'the admin operations whose secret is not set refuse every call');
}

/** The warm-up before readiness (sidecar/warm-up.ts); one that fails leaves the gateway serving cold, as it would without. */
async function warmRequestPath(requests: number, local: LocalSettings, logger: Logger, signal: AbortSignal): Promise<void> {
  try {
    const { statuses, failed, elapsedMs } = await warmUp({ requests, local, logger, signal });
    logger.info({ statuses, failed, elapsedMs }, 'request path warmed up');
  } catch (err) {
    logger.warn({ err }, 'warm-up failed: serving without it');
  }
}

/**
 * One gateway process: proxy, admin and health listeners over one config runtime, one
 * limit engine and one store. Invalid local settings (SettingsError) and a TLS pair that
 * cannot serve (TlsFilesError) throw before anything listens.
 */
export async function startSidecar(options: SidecarOptions, overrides: SidecarOverrides = {}): Promise<RunningSidecar> {
  const local = loadLocalSettings(options.settingsFile, overrides.env ?? process.env);
  const settings = resolveSettings(undefined, local);
  const startLogger = overrides.logger ?? createLogger('gw-sidecar');
  // Opened before anything starts: a pair that cannot serve stops the start here.
  const tls = await openTls(options, startLogger);
  const parts = buildParts(options, { ...overrides, logger: startLogger }, settings);
  const { logger, metrics, engine, redis, redisError } = parts;
  const forwarderOptions = {
    timeoutMs: () => runtime.state().settings.upstream_timeout_ms,
    maxBodyBytes: () => runtime.state().settings.max_request_body_bytes,
  };
  const httpProxy = new HttpProxyForwarder(forwarderOptions);
  const undici = new UndiciForwarder(forwarderOptions);
  const source = selectSource(options, overrides, parts, settings, await retainedByOtherWorkers(options, overrides, parts));
  const streams = overrides.worker?.streams ?? new StreamLimiters();
  const runtime = new ConfigRuntime({
    source,
    local,
    engine,
    logger,
    metrics,
    onSwap: (state) => {
      for (const forwarder of [undici, httpProxy]) forwarder.retainOrigins(state.routes.origins);
      streams.configure(streamResourcesOf(runtime.apis()));
      retainApiSeries(metrics, new Set(runtime.apis().map((api) => api.api_id)));
    },
  });
  const sessions = cachedSessions(parts, options.sessionCacheSize, () => runtime.state().settings, source);
  const gateway = new Gateway({
    state: runtime.state,
    engine,
    sessions: sessions.cache,
    forwarders: { undici, 'http-proxy': httpProxy },
    upgrades: httpProxy,
    streams,
    metrics,
    logger,
  });
  const warming = new AbortController();
  let warmedUp = options.warmUpRequests === 0 || options.listen === PROXY_OFF;
  // Redis away makes the gateway unready only when it then refuses (failure mode closed):
  // failing open, it serves on, and an unready pod would take the app out of its Service.
  // From the start of its stop, so that a load balancer sends it nothing new while it drains.
  let stopping = false;
  const readiness = (): Readiness => {
    const reasons: string[] = [];
    const problems = [...runtime.problems()];
    if (stopping) reasons.push('stopping');
    if (!runtime.loaded) reasons.push('config not loaded');
    if (!warmedUp) reasons.push('warming up');
    // A hung Redis keeps its connection up: its calls time out, which the store reports.
    const redisState = redis && redis.status !== 'ready' ? withCause(redis.status, redisError()) : engine.storeFailing ? 'calls failing (timing out, or answered with errors)' : null;
    if (redisState !== null) {
      if (runtime.state().settings.redis_failure_mode === 'closed') reasons.push(`redis ${redisState}`);
      else problems.push({ subject: 'Redis', reason: `${redisState}; requests admitted (redis_failure_mode open)` });
    }
    return { ready: reasons.length === 0, reasons, problems };
  };
  const tlsOf = (listener: TlsListener): ReloadingTlsFiles | undefined => (options.tlsListeners ?? TLS_LISTENERS_ALL).has(listener) ? tls : undefined;
  // The proxy listener's own refusals (a request it could not parse, too many headers, …) belong to no API.
  const refused = (error: GatewayError): void => {
    metrics.requests.inc('', statusClass(error.status));
    metrics.gatewayErrors.inc('', error.code);
  };
  const proxyServer = boundedServer(gateway.handle, overrides, tlsOf('proxy'), { handlerContinues: true, refused });
  const upgraded = new Set<Duplex>();
  proxyServer.on('upgrade', boundedUpgrade(gateway.upgrade, upgraded, refused));
  const healthServer = boundedServer(createHealthHandler(metricsOf(metrics.registry), { readiness }), overrides);
  const adminServer: Server = boundedServer(adminHandler(options, overrides, parts, runtime), overrides, tlsOf('admin'), { handlerContinues: true, refusalShape: adminRefusalShape });
  adminServer.once('listening', () => warnUnsetSecrets(options, logger));
  tls?.watch(TLS_POLL_MS);
  const drainMs = overrides.drainMs ?? 10_000;
  let warm: Promise<void> = Promise.resolve();
  const close = async (): Promise<void> => {
    stopping = true;
    warming.abort();
    await Promise.all([
      drain(proxyServer, drainMs, { upgraded, answering: answersInFlight(proxyServer) }),
      drain(adminServer, drainMs, { answering: answersInFlight(adminServer) }),
      warm,
    ]);
    await drain(healthServer, 1000);
    await runtime.stop();
    tls?.close();
    await Promise.all([engine.close(), undici.close(), httpProxy.close(), parts.events.close?.()]);
    await sessions.close();
    if (redis) await redis.quit().catch(() => redis.disconnect());
    logger.info('gw-sidecar stopped');
  };
  const warmUpNow = (): Promise<void> => (warm = warmedUp ? warm : warmRequestPath(options.warmUpRequests, local, logger, warming.signal).finally(() => (warmedUp = true)));
  try {
    // A worker joins the proxy port only once warmed up: the kernel hands every socket of the
    // port's group its share of new connections at once, ready or not (docs/architecture.md#warm-up).
    if (overrides.worker) await Promise.all([warmUpNow(), runtime.start()]);
    const [proxyInfo, adminInfo, healthInfo] = await listenAll(options, overrides.worker, { proxy: proxyServer, admin: adminServer, health: healthServer });
    if (!overrides.worker) {
      // While the config loads (in a cluster, mostly a wait on the API server); /readyz waits for both.
      void warmUpNow();
      await runtime.start();
    }
    const schemeOf = (listener: TlsListener): 'http' | 'https' => (tlsOf(listener) ? 'https' : 'http');
    const proxyUrl = proxyInfo ? urlOf(proxyInfo, schemeOf('proxy')) : PROXY_OFF;
    const adminUrl = adminInfo ? urlOf(adminInfo, schemeOf('admin')) : PROXY_OFF;
    const healthUrl = healthInfo ? urlOf(healthInfo) : PROXY_OFF;
    logger.info({ proxy: proxyUrl, admin: adminUrl, health: healthUrl }, 'gw-sidecar listening');
    return { proxyUrl, adminUrl, healthUrl, runtime, metrics, readiness, resources: parts.resources, close };
  } catch (err) {
    // Whatever did start (listeners, Redis, timers) is stopped so a failed start leaves nothing running.
    await close().catch(() => undefined);
    throw err;
  }
}
