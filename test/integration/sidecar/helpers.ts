import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { Redis, type Cluster } from 'ioredis';
import { pino } from 'pino';
import { API_ID_LABEL, CONFIG_KEY, configMapName, MANAGED_BY, MANAGED_BY_LABEL } from '../../../common/compiled-config-map.ts';
import { labelValueFor } from '../../../common/label-value.ts';
import { RedisSessionStore } from '../../../common/session-store.ts';
import type { CompiledApi, CompiledConfig, CompiledPolicy } from '../../../crds/compiled.ts';
import { keyHash } from '../../../crds/key-hash.ts';
import { sessionSchema } from '../../../crds/session.ts';
import type { GatewaySettings } from '../../../crds/settings.ts';
import { startSidecar, type RunningSidecar, type SidecarOverrides } from '../../../sidecar/app.ts';
import type { SidecarOptions } from '../../../sidecar/cli.ts';
import { SESSION_CACHE_DEFAULT_SIZE } from '../../../sidecar/auth/session-cache.ts';
import { kubeConfig, testEnv } from '../../harness/index.ts';
import { api, config } from '../../support/compiled-fixtures.ts';

export const quietLogger = pino({ level: process.env.GW_TEST_LOG_LEVEL ?? 'silent' });

export const uniqueId = (prefix: string): string => `${prefix}-${randomBytes(4).toString('hex')}`;

/** A keyless API in front of `targetUrl`, unless the overrides say otherwise. */
export function compiledApi(apiId: string, targetUrl: string, overrides: Partial<CompiledApi> = {}): CompiledApi {
  return api(apiId, { keyless: true, target_url: targetUrl, ...overrides });
}

export function compiledConfig(apis: CompiledApi[], settings: Partial<GatewaySettings> = {}, policies: CompiledPolicy[] = []): CompiledConfig {
  return config({ apis, settings, policies });
}

/** Write (create or replace) the ConfigMap the operator would write for one API. */
export async function writeConfigMap(namespace: string, apiId: string, data: string, kc: KubeConfig = kubeConfig()): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const name = configMapName(apiId);
  const body = {
    metadata: { name, namespace, labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [API_ID_LABEL]: labelValueFor(apiId) } },
    data: { [CONFIG_KEY]: data },
  };
  try {
    await core.replaceNamespacedConfigMap({ name, namespace, body });
  } catch (err) {
    if ((err as { code?: number }).code !== 404) throw err;
    await core.createNamespacedConfigMap({ namespace, body });
  }
}

export function sidecarOptions(namespace: string, redisUrl: string | undefined = testEnv().redisUrl): SidecarOptions {
  return {
    configDir: undefined,
    listen: '127.0.0.1:0',
    adminListen: '127.0.0.1:0',
    healthListen: '127.0.0.1:0',
    redisUrl,
    workers: 1,
    // The warm-up's own tests turn it on (warm-up.test.ts): elsewhere it would only compete with the test for the CPU.
    warmUpRequests: 0,
    sessionCacheSize: SESSION_CACHE_DEFAULT_SIZE,
    settingsFile: undefined,
    apis: '*',
    namespace,
    instanceId: uniqueId('sidecar'),
    adminSecret: 'test-admin-secret',
    portalSecret: 'test-portal-secret',
    bearerTokens: [],
    kubeconfig: testEnv().kubeconfig,
    logLevel: 'info',
  };
}

export function startTestSidecar(options: SidecarOptions, overrides: SidecarOverrides = {}): Promise<RunningSidecar> {
  return startSidecar(options, { logger: quietLogger, kubeConfig: kubeConfig(), env: {}, drainMs: 2000, ...overrides });
}

/** Poll until `check` holds (bounded). */
export async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export const servesApi = (sidecar: RunningSidecar, apiId: string) => () => sidecar.runtime.apis().some((a) => a.api_id === apiId);

/** Publish one API's config as the operator would, then wait until the sidecar serves it. */
export async function deployApi(
  sidecar: RunningSidecar,
  namespace: string,
  api: CompiledApi,
  settings: Partial<GatewaySettings> = {},
  policies: CompiledPolicy[] = [],
): Promise<void> {
  await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api], settings, policies)));
  await eventually(servesApi(sidecar, api.api_id), 10_000, `api ${api.api_id} loaded`);
}

/** Store a session in the harness Redis for a fresh raw key; returns the raw key. */
export async function storeSession(redis: Redis | Cluster, fields: Record<string, unknown>): Promise<string> {
  const rawKey = randomBytes(16).toString('hex');
  await new RedisSessionStore(redis).put(keyHash(rawKey), sessionSchema.parse(fields));
  return rawKey;
}

export const newRedis = (): Redis => new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });

export interface CallResult {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json(): Record<string, unknown>;
}

export interface CallOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Send the body with Transfer-Encoding: chunked (no Content-Length), in pieces of this size. */
  chunked?: number;
}

/** A plain node:http call (fresh connection), so tests control every header, Connection included. */
export function call(url: string, options: CallOptions = {}): Promise<CallResult> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? 'GET', headers: options.headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) as Record<string, unknown> });
      });
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error('test request timed out')));
    const body = options.body === undefined ? undefined : Buffer.from(options.body);
    if (body !== undefined && options.chunked !== undefined) {
      for (let i = 0; i < body.length; i += options.chunked) req.write(body.subarray(i, i + options.chunked));
      req.end();
    } else {
      req.end(body);
    }
  });
}

export interface SidecarChild {
  proc: ChildProcess;
  stderr: () => string;
  /** Its log lines (warnings and errors: GW_LOG_LEVEL is warn unless `env` says otherwise). */
  stdout: () => string;
  exited: Promise<number | null>;
}

/**
 * The gw-sidecar binary as a child process, start-up refusals on its stderr; without the
 * warm-up unless `env` asks for it (as `sidecarOptions`: it only competes with the tests for the CPU).
 */
export function spawnSidecar(args: string[], env: NodeJS.ProcessEnv = {}): SidecarChild {
  const root = new URL('../../../', import.meta.url).pathname;
  const proc = spawn(process.execPath, ['sidecar/main.ts', ...args], { cwd: root, env: { PATH: process.env.PATH, GW_LOG_LEVEL: 'warn', GW_WARM_UP_REQUESTS: '0', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  proc.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  proc.stdout?.on('data', (c: Buffer) => (stdout += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, stderr: () => stderr, stdout: () => stdout, exited };
}

/**
 * A request whose client waits for 100 Continue before its body: `head` is sent, and `body`
 * only once a 100 Continue has come. What came back before the connection closed or
 * `waitMs` passed, and whether the body was sent.
 */
export function withExpectation(base: string, head: string, body: string, waitMs = 1_500): Promise<{ text: string; closed: boolean; bodySent: boolean }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(head));
    let text = '';
    let bodySent = false;
    const done = (closed: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, closed, bodySent });
    };
    const timer = setTimeout(() => done(false), waitMs);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (!bodySent && text.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
        bodySent = true;
        socket.write(body);
      }
    });
    socket.on('close', () => done(true));
    socket.on('error', reject);
  });
}
