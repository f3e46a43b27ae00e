import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { Registry } from 'prom-client';
import { Pool } from 'undici';
import type { Logger } from '../common/logger.ts';
import { sessionFromKey } from '../common/session-from-key.ts';
import { MemorySessionStore } from '../common/session-store.ts';
import { resolveSettings, type LocalSettings } from '../common/settings-loader.ts';
import { drain, listen, urlOf } from '../common/listen.ts';
import { compile, type ApiDefinitionInput } from '../crds/compile/index.ts';
import type { CompiledConfig } from '../crds/compiled.ts';
import { keyHash } from '../crds/key-hash.ts';
import { SessionCache } from './auth/session-cache.ts';
import { boundedServer } from './bounded-server.ts';
import { ConfigRuntime } from './config/runtime.ts';
import type { ConfigSource } from './config/source.ts';
import { Gateway } from './gateway/gateway.ts';
import { createLimitBackends } from './limits/backends.ts';
import { createLimitEngine } from './limits/engine.ts';
import { StreamLimiters } from './limits/stream-limiter.ts';
import { createSidecarMetrics } from './metrics.ts';
import { HttpProxyForwarder } from './proxy/http-proxy-forwarder.ts';
import { UndiciForwarder } from './proxy/undici-forwarder.ts';
import { WARM_UP_DEADLINE_MS } from './warm-up-bounds.ts';


/** Requests in flight at once, as a few busy client connections send them. */
const WARM_UP_CONNECTIONS = 8;

export interface WarmUpOptions {
  /** Requests to send in all (half keyless, half with a key); 0 sends none. */
  requests: number;
  /** The gateway's own settings, so the warm-up runs the forwarder and response headers the gateway will. */
  local: LocalSettings;
  logger: Logger;
  /** Ends the warm-up early (the gateway is closing). */
  signal?: AbortSignal;
  deadlineMs?: number;
}

export interface WarmUpResult {
  /** Answers by status code. */
  statuses: Record<string, number>;
  /** Requests that got no answer (a transport error). */
  failed: number;
  elapsedMs: number;
}

/** Two APIs on the warm-up's upstream: one keyless, one with an auth token, a rate limit and a quota. */
function warmUpConfig(upstream: string, local: LocalSettings, hash: string): { config: CompiledConfig; session: ReturnType<typeof sessionFromKey> } {
  const api = (id: string, keyless: boolean): ApiDefinitionInput => ({
    metadata: { name: id, namespace: 'gw-warm-up' },
    spec: { api_id: id, name: id, use_keyless: keyless, proxy: { listen_path: `/${id}/`, target_url: upstream, strip_listen_path: true } },
  });
  const { config } = compile({ apiDefinitions: [api('warm-up-keyless', true), api('warm-up-keyed', false)], policies: [], settings: resolveSettings(undefined, local) });
  const keySpec = { key_hash: hash, rate: 1_000_000_000, per: 1, quota_max: 1_000_000_000, quota_renewal_rate: 3600, access_rights: { 'warm-up-keyed': { api_id: 'warm-up-keyed', api_name: 'warm-up-keyed' } } };
  return { config, session: sessionFromKey(keySpec, { name: 'warm-up', namespace: 'gw-warm-up' }, null, new Date()) };
}

/** A source that publishes one config once. */
function fixedSource(config: CompiledConfig): ConfigSource {
  return {
    name: 'warm-up',
    start: (publish) => Promise.resolve(publish(config)),
    reload: () => Promise.resolve(),
    stop: () => Promise.resolve(),
    problems: () => [],
  };
}

/**
 * Runs the request path before the gateway turns ready (docs/architecture.md#warm-up). A
 * fresh process spends the first seconds under load compiling that path, at about 1.4 times
 * the CPU of a request later on, and the requests queue behind it: that is the latency a
 * rolling update under load shows. So the gateway first sends `requests` requests through a
 * gateway of its own, built from the same classes (routing, authentication, the limit
 * engine, the forwarder, the response headers), on loopback ports, to a loopback upstream.
 * It shares nothing with the real one: its own config, in-memory store and sessions,
 * metrics registry and connection pools; its key is random and goes nowhere else. The
 * in-memory store stands in for Redis, so the Redis client's own code is not warmed.
 */
export async function warmUp(options: WarmUpOptions): Promise<WarmUpResult> {
  const started = performance.now();
  const deadline = Date.now() + (options.deadlineMs ?? WARM_UP_DEADLINE_MS);
  const result: WarmUpResult = { statuses: {}, failed: 0, elapsedMs: 0 };
  if (options.requests <= 0) return result;
  // Its config loads and swaps are not the gateway's: only what goes wrong is logged.
  const quieter = options.logger.levels.values[options.logger.level]! > options.logger.levels.values.warn! ? options.logger.level : 'warn';
  const logger = options.logger.child({ warmUp: true }, { level: quieter });
  const upstream = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"warm":true}');
  });
  const rawKey = randomBytes(24).toString('hex');
  const sessions = new MemorySessionStore();
  const metrics = createSidecarMetrics(new Registry(), { processMetrics: false });
  const engine = createLimitEngine({
    config: { version: 1, settings: resolveSettings(undefined, options.local), apis: [], policies: {} },
    backends: createLimitBackends({ instanceId: 'warm-up', drlPeer: false, logger, registry: metrics.registry }),
    events: { emit: () => undefined },
    logger,
    registry: metrics.registry,
  });
  const forwarderOptions = { timeoutMs: () => 5000, maxBodyBytes: () => 1024 };
  const undici = new UndiciForwarder(forwarderOptions);
  const httpProxy = new HttpProxyForwarder(forwarderOptions);
  let gatewayServer: Server | undefined;
  let client: Pool | undefined;
  try {
    const upstreamUrl = urlOf(await listen(upstream, '127.0.0.1:0'));
    const hash = keyHash(rawKey);
    const { config, session } = warmUpConfig(upstreamUrl, options.local, hash);
    if (!session.ok) throw new Error(`warm-up key: ${session.message}`);
    await sessions.put(hash, session.session);
    const runtime = new ConfigRuntime({ source: fixedSource(config), local: options.local, engine, logger, metrics });
    await runtime.start();
    const gateway = new Gateway({
      state: runtime.state,
      engine,
      sessions: new SessionCache(sessions),
      forwarders: { undici, 'http-proxy': httpProxy },
      upgrades: httpProxy,
      streams: new StreamLimiters(),
      metrics,
      logger,
    });
    gatewayServer = boundedServer(gateway.handle, {}, undefined, { handlerContinues: true });
    const pool = (client = new Pool(urlOf(await listen(gatewayServer, '127.0.0.1:0')), { connections: WARM_UP_CONNECTIONS }));
    let sent = 0;
    const more = (): boolean => sent < options.requests && Date.now() < deadline && !options.signal?.aborted;
    const send = async (): Promise<void> => {
      while (more()) {
        const keyed = sent++ % 2 === 1;
        try {
          const answer = await pool.request({ method: 'GET', path: keyed ? '/warm-up-keyed/' : '/warm-up-keyless/', headers: keyed ? { authorization: rawKey } : {} });
          await answer.body.dump();
          result.statuses[answer.statusCode] = (result.statuses[answer.statusCode] ?? 0) + 1;
        } catch {
          result.failed += 1;
        }
      }
    };
    await Promise.all(Array.from({ length: WARM_UP_CONNECTIONS }, send));
  } finally {
    await client?.close();
    if (gatewayServer) await drain(gatewayServer, 1000);
    await drain(upstream, 1000);
    await Promise.all([engine.close(), undici.close(), httpProxy.close()]);
  }
  result.elapsedMs = Math.round(performance.now() - started);
  return result;
}
