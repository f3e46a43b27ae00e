import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { createLogger } from '../../../common/logger.ts';
import { RedisSessionStore, type SessionStore } from '../../../common/session-store.ts';
import { group, kinds, version } from '../../../crds/kinds.ts';
import { defaultGatewaySettings } from '../../../crds/settings.ts';
import { RouteTable } from '../../../sidecar/gateway/routes.ts';
import type { AdminDeps } from '../../../sidecar/admin/index.ts';
import { KubernetesBearerAuthenticator } from '../../../sidecar/admin/kube-bearer.ts';
import { KubernetesResourceStore } from '../../../sidecar/resources/kubernetes-store.ts';
import type { ResourceStore } from '../../../sidecar/resources/types.ts';
import type { BearerAuthenticator } from '../../../sidecar/admin/bearer.ts';
import { kubeConfig, testEnv } from '../../harness/index.ts';
import { latencyProxy } from '../../support/latency-proxy.ts';

export const ADMIN_SECRET = 'admin-secret-for-tests-0123456789';
export const PORTAL_SECRET = 'portal-secret-for-tests-0123456789';

/** The admin tests keep their sessions in a Redis database of their own, so DBSIZE is theirs to assert. */
export const ADMIN_TEST_DB = 11;

export function testRedis(url = testEnv().redisUrl): Redis {
  // Fail fast when Redis is down (the tests stop one on purpose) instead of queueing.
  return new Redis(url, { db: ADMIN_TEST_DB, maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 2_000 });
}

export async function connected(redis: Redis): Promise<Redis> {
  if (redis.status !== 'ready') await new Promise((resolve) => redis.once('ready', resolve));
  return redis;
}

/** A kubeconfig for a server that is not there: the API-server-fault cases. */
export function unreachableKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'gone', server: 'https://127.0.0.1:1', skipTLSVerify: true }],
    users: [{ name: 'nobody', token: 'x' }],
    contexts: [{ name: 'gone', cluster: 'gone', user: 'nobody' }],
    currentContext: 'gone',
  });
  return kc;
}

/**
 * The harness's API server behind a link on which every byte the client sends arrives
 * `delayMs` late (test/support/latency-proxy.ts), as on an API server that stalls: a request
 * lands a few round trips of that later, and still does what it asks.
 */
export async function stallingKubeConfig(delayMs: number): Promise<{ kc: KubeConfig; close(): Promise<void> }> {
  const base = kubeConfig();
  const proxy = await latencyProxy(base.getCurrentCluster()!.server);
  proxy.delayMs = delayMs;
  const server = proxy.url.replace(/\/$/, '');
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: base.clusters.map((cluster) => ({ ...cluster, server })),
    users: base.users,
    contexts: base.contexts,
    currentContext: base.currentContext,
  });
  return { kc, close: () => proxy.close() };
}

export interface DepsOverrides {
  resources?: ResourceStore;
  sessions?: SessionStore;
  bearer?: BearerAuthenticator;
  namespace?: string;
  reload?: () => Promise<void>;
}

export interface TestDeps {
  deps: AdminDeps;
  reloads: { count: number };
}

/** Real stores on the harness: resources in `namespace` of the API server, sessions in Redis. */
export function clusterDeps(namespace: string, redis: Redis, overrides: DepsOverrides = {}): TestDeps {
  const reloads = { count: 0 };
  const deps: AdminDeps = {
    resources: overrides.resources ?? new KubernetesResourceStore(kubeConfig(), [namespace]),
    sessions: overrides.sessions ?? new RedisSessionStore(redis),
    runtime: {
      reload:
        overrides.reload ??
        (async () => {
          reloads.count += 1;
        }),
    },
    // No API loaded: a limits read answers 404 before it reaches the engine.
    gateways: { live: (apiIds) => Promise.resolve(new Map(apiIds.map((id) => [id, []]))) },
    limits: { apis: () => [], state: () => ({ loaded: true, routes: new RouteTable([]), settings: defaultGatewaySettings, policies: {} }), engine: { explain: () => Promise.reject(new Error('no API is loaded')) } },
    auth: {
      adminSecret: ADMIN_SECRET,
      portalSecret: PORTAL_SECRET,
      bearer: overrides.bearer ?? new KubernetesBearerAuthenticator(kubeConfig()),
    },
    logger: createLogger('admin-test', 'silent'),
    namespace: overrides.namespace ?? namespace,
  };
  return { deps, reloads };
}

export async function listCustom(namespace: string, plural: string): Promise<{ metadata: { name: string; resourceVersion: string }; spec: Record<string, unknown> }[]> {
  const api = kubeConfig().makeApiClient(CustomObjectsApi);
  const list = (await api.listNamespacedCustomObject({ group, version, namespace, plural })) as {
    items: { metadata: { name: string; resourceVersion: string }; spec: Record<string, unknown> }[];
  };
  return list.items;
}

export const keysIn = (namespace: string) => listCustom(namespace, kinds.Key.plural);

/** An OAS ApiDefinition (YAML document) with categories, served at /pets/; `metadata` is its YAML metadata value. */
export const petsOasApi = (metadata: string, apiId: string, categories: string[]): string => `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: ${metadata}
spec:
  api_id: ${apiId}
  categories: [${categories.join(', ')}]
  oas:
    openapi: 3.0.3
    info: { title: Pets, version: 1.0.0 }
    paths: {}
    x-gw-api-gateway:
      server: { listenPath: { value: /pets/ } }
      upstream: { url: http://127.0.0.1:9000 }
`;
