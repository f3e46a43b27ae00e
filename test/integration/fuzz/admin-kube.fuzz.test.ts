import { CustomObjectsApi } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { group, kinds, version } from '../../../crds/kinds.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { fuzzTimeout } from '../../support/fuzz.ts';
import { sidecarOptions, startTestSidecar, uniqueId } from '../sidecar/helpers.ts';
import { adminOperations, databaseState, fuzzOperation, ownDatabase, type Secrets } from './admin-requests.ts';

/**
 * The admin operations of a real sidecar in Kubernetes mode (resources on the harness's
 * API server, sessions in Redis, bearer tokens checked by TokenReview), fuzzed as in
 * folder mode with fewer runs: no 5xx, the operation's own error shape, and a refusal
 * creates, changes or deletes no resource and no Redis key.
 */

const RUNS = 10;
const REDIS_DB = 15;

const secrets: Secrets = { admin: 'fuzz-kube-admin-secret-0123456789', portal: 'fuzz-kube-portal-secret-0123456789', bearer: 'not-a-service-account-token' };

const manifests = [
  { apiVersion: `${group}/${version}`, kind: 'ApiDefinition', metadata: { name: 'toys' }, spec: { api_id: 'toys', categories: ['fun'], use_keyless: true, proxy: { listen_path: '/toys/', target_url: 'http://127.0.0.1:9' } } },
  { apiVersion: `${group}/${version}`, kind: 'PortalProduct', metadata: { name: 'starter' }, spec: { id: 'prod-1', tags: [{ Name: 'first' }] } },
  { apiVersion: `${group}/${version}`, kind: 'Category', metadata: { name: 'fun' }, spec: {} },
];

describe('admin operations on the API server, fuzzed', () => {
  let namespace: string;
  let redis: Redis;
  let sidecar: RunningSidecar;
  const custom = () => kubeConfig().makeApiClient(CustomObjectsApi);

  type Listed = { items: { metadata: { name: string; resourceVersion: string } }[] };
  /** A list, waiting out the API server's "storage is (re)initializing" (429 with Retry-After) as clients should. */
  const list = async (plural: string): Promise<Listed> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return (await custom().listNamespacedCustomObject({ group, version, namespace, plural })) as Listed;
      } catch (err) {
        if ((err as { code?: number }).code !== 429 || attempt === 20) throw err;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  };
  /** Every gw resource of the namespace by kind and name, at its resourceVersion. */
  const resources = async (): Promise<string[]> => {
    const out: string[] = [];
    for (const kind of Object.values(kinds)) {
      const listed = await list(kind.plural);
      out.push(...listed.items.map((i) => `${kind.kind}/${i.metadata.name}@${i.metadata.resourceVersion}`));
    }
    return out.sort();
  };
  const state = async () => ({ resources: await resources(), redis: await databaseState(redis) });

  async function applyBaseline(): Promise<void> {
    const applied = await kubectl(['apply', '-n', namespace, '-f', '-'], { input: manifests.map((m) => JSON.stringify(m)).join('\n') });
    expect(applied.code, applied.stderr).toBe(0);
  }

  /** After an accepted write: the baseline resources again, no Keys, no sessions. */
  async function restore(): Promise<void> {
    await applyBaseline();
    const deleted = await kubectl(['delete', 'keys.gw.dev', '--all', '-n', namespace, '--wait=false']);
    expect(deleted.code, deleted.stderr).toBe(0);
    await redis.flushdb();
  }

  beforeAll(async () => {
    namespace = await createNamespace('fuzz-admin');
    await applyBaseline();
    const own = await ownDatabase(REDIS_DB);
    redis = own.redis;
    sidecar = await startTestSidecar({
      ...sidecarOptions(namespace, own.url),
      listen: 'off',
      instanceId: uniqueId('fuzz-kube'),
      adminSecret: secrets.admin,
      portalSecret: secrets.portal,
    });
  });

  afterAll(async () => {
    await sidecar?.close();
    await redis?.flushdb();
    redis?.disconnect();
  });

  it.each(adminOperations({ api: 'toys', product: 'prod-1' }).map((op) => [op.name, op] as const))(
    '%s: no 5xx, its own error shape, no resource or Redis key changed by a refusal',
    { timeout: fuzzTimeout(RUNS, 1_500) },
    (_name, op) => fuzzOperation(op, secrets, { adminUrl: sidecar.adminUrl, healthUrl: sidecar.healthUrl, state, restore }, RUNS),
  );
});
