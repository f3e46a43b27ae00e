import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AuthenticationV1Api, AuthorizationV1Api, KubeConfig } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesBearerAuthenticator } from '../../../sidecar/admin/kube-bearer.ts';
import { REVIEW_TTL_MS } from '../../../sidecar/admin/review-cache.ts';
import { KubernetesResourceStore } from '../../../sidecar/resources/kubernetes-store.ts';
import { chartIdentities, type PodIdentities } from '../../e2e/support/identities.ts';
import { createNamespace, kubeConfig, kubectl, testEnv } from '../../harness/index.ts';
import { runKubectl } from '../../harness/kubectl.ts';
import { serviceAccountToken } from '../../support/service-account.ts';
import { startAdmin, type AdminResponse, type AdminServer } from './admin-client.ts';
import { clusterDeps, connected, petsOasApi, testRedis } from './fixtures.ts';

/**
 * The reviews behind the category reads, counted on the real API server: its own
 * `apiserver_request_total` for tokenreviews and subjectaccessreviews (integration files
 * run one at a time on the run's control plane, so nothing else makes reviews meanwhile).
 */
async function reviewsMade(): Promise<{ tokenReviews: number; accessReviews: number }> {
  const metrics = (await kubectl(['get', '--raw', '/metrics'])).stdout.split('\n');
  const posts = (resource: string): number =>
    metrics
      .filter((line) => line.startsWith('apiserver_request_total{') && line.includes(`resource="${resource}"`) && line.includes('verb="POST"'))
      .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
  return { tokenReviews: posts('tokenreviews'), accessReviews: posts('subjectaccessreviews') };
}

async function reviewsDuring(act: () => Promise<void>): Promise<{ tokenReviews: number; accessReviews: number }> {
  const before = await reviewsMade();
  await act();
  const after = await reviewsMade();
  return { tokenReviews: after.tokenReviews - before.tokenReviews, accessReviews: after.accessReviews - before.accessReviews };
}

const ONE_API = '/api/apis/oas/pets-oas/categories';
const ALL = '/api/apis/categories';

describe('category reads: reviews cached per token', () => {
  let namespace: string;
  let redis: Redis;
  const tokens: Record<'reader' | 'lister' | 'nobody', string> = { reader: '', lister: '', nobody: '' };
  const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`];
  /** An admin listener with its own authenticator, so its cache starts empty. */
  const admin = (ttlMs?: number): Promise<AdminServer> =>
    startAdmin(clusterDeps(namespace, redis, { bearer: new KubernetesBearerAuthenticator(kubeConfig(), ttlMs === undefined ? {} : { ttlMs }) }).deps);
  /** The distinct statuses, and the first failure's body as the message when there is one. */
  const expectAllOk = (replies: AdminResponse[]): void => {
    expect([...new Set(replies.map((r) => r.status))], replies.find((r) => r.status !== 200)?.text).toEqual([200]);
  };

  beforeAll(async () => {
    namespace = await createNamespace('admin-reviews');
    await kubectl(['apply', '-f', '-'], { input: petsOasApi(`{ name: pets, namespace: ${namespace} }`, 'pets-oas', ['animals']) });
    tokens.reader = await serviceAccountToken(namespace, 'reader', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], verbs: ['get'] }]);
    tokens.lister = await serviceAccountToken(namespace, 'lister', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions', 'categories'], verbs: ['list'] }]);
    tokens.nobody = await serviceAccountToken(namespace, 'nobody', []);
    // The first read of a kind on a fresh API server can meet "storage is (re)initializing"
    // (429) while its watch cache fills; kubectl waits that out, so the reads below do not.
    await kubectl(['get', 'apidefinitions,categories', '-n', namespace]);
    redis = await connected(testRedis());
  });

  afterAll(() => {
    redis?.disconnect();
  });

  it('makes one TokenReview and one SubjectAccessReview for 100 reads of one API with one token', async () => {
    const server = await admin();
    try {
      const replies: AdminResponse[] = [];
      const started = Date.now();
      const made = await reviewsDuring(async () => {
        for (let batch = 0; batch < 10; batch++) {
          replies.push(...(await Promise.all(Array.from({ length: 10 }, () => server.call('GET', ONE_API, { headers: [bearer(tokens.reader)] })))));
        }
      });
      // All within the cache time, or the count below would not be about one cache entry.
      expect(Date.now() - started).toBeLessThan(REVIEW_TTL_MS);
      expect(replies).toHaveLength(100);
      expectAllOk(replies);
      expect(made).toEqual({ tokenReviews: 1, accessReviews: 1 });
    } finally {
      await server.close();
    }
  });

  it('makes one TokenReview and one SubjectAccessReview per check for 100 concurrent reads of the list', async () => {
    const server = await admin();
    try {
      let replies: AdminResponse[] = [];
      const made = await reviewsDuring(async () => {
        replies = await Promise.all(Array.from({ length: 100 }, () => server.call('GET', ALL, { headers: [bearer(tokens.lister)] })));
      });
      expectAllOk(replies);
      // The list needs two permissions: list apidefinitions and list categories.
      expect(made).toEqual({ tokenReviews: 1, accessReviews: 2 });
    } finally {
      await server.close();
    }
  });

  it('never answers one token from another token\'s entry', async () => {
    const server = await admin();
    try {
      const made = await reviewsDuring(async () => {
        expect((await server.call('GET', ONE_API, { headers: [bearer(tokens.reader)] })).status).toBe(200);
        expect((await server.call('GET', ONE_API, { headers: [bearer(tokens.nobody)] })).status).toBe(403);
        expect((await server.call('GET', ONE_API, { headers: [bearer(tokens.lister)] })).status).toBe(403);
        expect((await server.call('GET', ONE_API, { headers: [bearer(`${tokens.reader}x`)] })).status).toBe(401);
        expect((await server.call('GET', ONE_API, { headers: [bearer(tokens.reader)] })).status).toBe(200);
        expect((await server.call('GET', ALL, { headers: [bearer(tokens.reader)] })).status).toBe(403);
      });
      // Four tokens, four TokenReviews; three of them valid, each with its own permission answers.
      expect(made).toEqual({ tokenReviews: 4, accessReviews: 5 });
    } finally {
      await server.close();
    }
  });

  /**
   * A `get apidefinitions` account read once (200) through an admin that keeps reviews for
   * `ttlMs`; then `revoke`, and wait until the API server itself no longer `accepts` it.
   */
  async function readThenRevoke(
    ttlMs: number,
    account: string,
    revoke: string[],
    accepts: (token: string) => Promise<boolean>,
  ): Promise<{ server: AdminServer; token: string; reviewedAt: number }> {
    const server = await admin(ttlMs);
    const token = await serviceAccountToken(namespace, account, [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], verbs: ['get'] }]);
    const reviewedAt = Date.now();
    expect((await server.call('GET', ONE_API, { headers: [bearer(token)] })).status).toBe(200);
    await kubectl([...revoke, '-n', namespace]);
    while (await accepts(token)) await sleep(100);
    return { server, token, reviewedAt };
  }

  it('keeps a revoked permission at most the cache time, then answers 403', async () => {
    const ttlMs = 4_000;
    const authz = kubeConfig().makeApiClient(AuthorizationV1Api);
    const user = `system:serviceaccount:${namespace}:unbound`;
    const resourceAttributes = { group: 'gw.dev', resource: 'apidefinitions', verb: 'get', namespace };
    const { server, token, reviewedAt } = await readThenRevoke(ttlMs, 'unbound', ['delete', 'rolebinding', 'unbound'], async () => {
      const review = await authz.createSubjectAccessReview({ body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { user, resourceAttributes } } });
      return review.status?.allowed === true;
    });
    try {
      expect(Date.now() - reviewedAt).toBeLessThan(ttlMs);
      // Within the cache time the kept answer stands, without asking (the documented bound on a revocation)...
      const kept = await reviewsDuring(async () => {
        expect((await server.call('GET', ONE_API, { headers: [bearer(token)] })).status).toBe(200);
      });
      expect(kept).toEqual({ tokenReviews: 0, accessReviews: 0 });
      // ...and once it is older, the caller is reviewed again and refused.
      await sleep(reviewedAt + ttlMs - Date.now() + 50);
      const refused = await server.call('GET', ONE_API, { headers: [bearer(token)] });
      expect(refused.status).toBe(403);
      expect(refused.json).toEqual({ Status: 'Error', Message: `access denied: You do not have permission to access ${ONE_API}`, Meta: null });
    } finally {
      await server.close();
    }
  });

  it('answers 401 to a token whose ServiceAccount was deleted once the API server refuses it and the kept review is older than the cache time', async () => {
    const ttlMs = 2_000;
    const authn = kubeConfig().makeApiClient(AuthenticationV1Api);
    // kube-apiserver keeps its own token answers for up to 10 s: the wait covers that.
    const { server, token, reviewedAt } = await readThenRevoke(ttlMs, 'deleted', ['delete', 'serviceaccount', 'deleted'], async (presented) => {
      const review = await authn.createTokenReview({ body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token: presented } } });
      return review.status?.authenticated === true;
    });
    try {
      await sleep(Math.max(0, reviewedAt + ttlMs - Date.now() + 50));
      const refused = await server.call('GET', ONE_API, { headers: [bearer(token)] });
      expect(refused.status).toBe(401);
      expect(refused.json).toEqual({ Status: 'Error', Message: 'Not authorised', Meta: null });
    } finally {
      await server.close();
    }
  }, 60_000);
});

describe('category reads on an injected sidecar (the chart\'s least-privilege gw-sidecar identity)', () => {
  let namespace: string;
  let redis: Redis;
  let identities: PodIdentities | undefined;
  let server: AdminServer;
  let dir = '';
  let token = '';
  const message = "Category reads are served by the admin gateway (Service gw-admin), not here: this gateway's ServiceAccount may not review tokens";

  beforeAll(async () => {
    const env = testEnv();
    namespace = await createNamespace('admin-sidecar-reads');
    dir = mkdtempSync(join(tmpdir(), 'gw-sidecar-reads-'));
    identities = await chartIdentities({ helmBin: env.helmBin, kubeconfig: env.kubeconfig, namespace, redisUrl: env.redisUrl, dir, kubectl });
    await kubectl(['apply', '-f', '-'], { input: petsOasApi(`{ name: pets, namespace: ${namespace} }`, 'pets-oas', ['animals']) });
    token = await serviceAccountToken(namespace, 'catalogue', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions', 'categories'], verbs: ['get', 'list'] }]);
    redis = await connected(testRedis());
    const sidecar = new KubeConfig();
    sidecar.loadFromFile(identities.sidecarKubeconfig);
    // What sidecar/app.ts builds in a pod, under the pod's ServiceAccount.
    server = await startAdmin(
      clusterDeps(namespace, redis, { bearer: new KubernetesBearerAuthenticator(sidecar), resources: new KubernetesResourceStore(sidecar, [namespace]) }).deps,
    );
  }, 120_000);

  afterAll(async () => {
    await server?.close();
    redis?.disconnect();
    await identities?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['a token allowed to read', ONE_API, () => token],
    ['a token allowed to list', ALL, () => token],
    ['a token the sidecar cannot check either', ALL, () => 'not-a-real-token'],
  ])('answers 403 naming the admin gateway, never a 5xx, to %s', async (_label, path, tokenOf) => {
    const reply = await server.call('GET', path, { headers: [['Authorization', `Bearer ${tokenOf()}`]] });
    expect(reply.status).toBe(403);
    expect(reply.json).toEqual({ Status: 'Error', Message: message, Meta: null });
    expect(reply.headers['x-gw-error-code']).toBe('reviews_not_permitted');
  });

  it('still answers 401 to a read without a bearer token', async () => {
    const reply = await server.call('GET', ALL);
    expect(reply.status).toBe(401);
    expect(reply.json).toEqual({ Status: 'Error', Message: 'Not authorised', Meta: null });
  });

  it('is refused the TokenReview by the API server: the identity really lacks the permission', async () => {
    const can = await runKubectl(identities!.sidecarKubeconfig, ['auth', 'can-i', 'create', 'tokenreviews.authentication.k8s.io'], { allowFail: true });
    expect(can.stdout.trim()).toBe('no');
  });
});
