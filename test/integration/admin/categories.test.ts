import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesBearerAuthenticator } from '../../../sidecar/admin/kube-bearer.ts';
import { KubernetesResourceStore } from '../../../sidecar/resources/kubernetes-store.ts';
import { createNamespace, kubectl } from '../../harness/index.ts';
import { serviceAccountToken } from '../../support/service-account.ts';
import { startAdmin, type AdminServer } from './admin-client.ts';
import { clusterDeps, connected, petsOasApi, testRedis, unreachableKubeConfig } from './fixtures.ts';

const resources = (namespace: string): string => `
${petsOasApi(`{ name: pets, namespace: ${namespace} }`, 'pets-oas', ['animals', 'public', 'animals'])}---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: toys, namespace: ${namespace} }
spec:
  api_id: toys-classic
  categories: [public]
  use_keyless: true
  proxy: { listen_path: /toys/, target_url: http://127.0.0.1:9000 }
---
apiVersion: gw.dev/v1alpha1
kind: Category
metadata: { name: internal, namespace: ${namespace} }
spec: { name: internal, description: nothing yet }
`;

describe('category reads with TokenReview and SubjectAccessReview', () => {
  let namespace: string;
  let redis: Redis;
  let admin: AdminServer;
  const tokens: Record<'reader' | 'petsReader' | 'toysReader' | 'lister' | 'nobody', string> = { reader: '', petsReader: '', toysReader: '', lister: '', nobody: '' };
  const bearer = (who: keyof typeof tokens): [string, string] => ['Authorization', `Bearer ${tokens[who]}`];

  beforeAll(async () => {
    namespace = await createNamespace('admin-cats');
    await kubectl(['apply', '-f', '-'], { input: resources(namespace) });
    tokens.reader = await serviceAccountToken(namespace, 'reader', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], verbs: ['get'] }]);
    // Granted `get` on one ApiDefinition by name (a Role's resourceNames), as kubectl honours it.
    tokens.petsReader = await serviceAccountToken(namespace, 'pets-reader', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], resourceNames: ['pets'], verbs: ['get'] }]);
    tokens.toysReader = await serviceAccountToken(namespace, 'toys-reader', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], resourceNames: ['toys'], verbs: ['get'] }]);
    tokens.lister = await serviceAccountToken(namespace, 'lister', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions', 'categories'], verbs: ['list'] }]);
    tokens.nobody = await serviceAccountToken(namespace, 'nobody', []);
    redis = await connected(testRedis());
    admin = await startAdmin(clusterDeps(namespace, redis).deps);
  });

  afterAll(async () => {
    await admin?.close();
    redis?.disconnect();
  });

  it('returns the categories of an OAS API to a token with get on apidefinitions', async () => {
    const res = await admin.call('GET', '/api/apis/oas/pets-oas/categories', { headers: [bearer('reader')] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ categories: ['animals', 'public'] });
  });

  it("returns an OAS API's categories to a token granted get on that ApiDefinition by name, and refuses one granted another", async () => {
    const granted = await admin.call('GET', '/api/apis/oas/pets-oas/categories', { headers: [bearer('petsReader')] });
    expect(granted.status).toBe(200);
    expect(granted.json).toEqual({ categories: ['animals', 'public'] });
    const other = await admin.call('GET', '/api/apis/oas/pets-oas/categories', { headers: [bearer('toysReader')] });
    expect(other.status).toBe(403);
    // An unknown id answers a name-scoped reader as any reader without the namespace's get: no probing.
    expect((await admin.call('GET', '/api/apis/oas/unknown/categories', { headers: [bearer('petsReader')] })).status).toBe(403);
  });

  it('lists every category with its API count to a token with list on apidefinitions and categories', async () => {
    const res = await admin.call('GET', '/api/apis/categories', { headers: [bearer('lister')] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({
      categories: [
        { name: 'animals', count: 1 },
        { name: 'internal', count: 0 },
        { name: 'public', count: 2 },
      ],
    });
  });

  it('follows changes to the resources', async () => {
    await kubectl(['patch', 'apidefinition', 'toys', '-n', namespace, '--type', 'merge', '-p', '{"spec":{"categories":["internal"]}}']);
    const res = await admin.call('GET', '/api/apis/categories', { headers: [bearer('lister')] });
    expect(res.json).toEqual({
      categories: [
        { name: 'animals', count: 1 },
        { name: 'internal', count: 1 },
        { name: 'public', count: 1 },
      ],
    });
    await kubectl(['patch', 'apidefinition', 'toys', '-n', namespace, '--type', 'merge', '-p', '{"spec":{"categories":["public"]}}']);
  });

  it.each([
    ['a token without the permission', '/api/apis/oas/pets-oas/categories', 'nobody'],
    ['a token with list but not get', '/api/apis/oas/pets-oas/categories', 'lister'],
    ['a token with get but not list', '/api/apis/categories', 'reader'],
    ['a token without permission asking for an unknown id', '/api/apis/oas/unknown/categories', 'nobody'],
  ] as const)('answers 403 naming the path to %s', async (_label, path, who) => {
    const res = await admin.call('GET', path, { headers: [bearer(who)] });
    expect(res.status).toBe(403);
    expect(res.json).toEqual({ Status: 'Error', Message: `access denied: You do not have permission to access ${path}`, Meta: null });
  });

  it.each([
    ['no Authorization', []],
    ['an invalid token', [['Authorization', 'Bearer not-a-real-token']]],
    ['a non-Bearer scheme', [['Authorization', 'Basic dXNlcjpwYXNz']]],
    ['an empty Bearer', [['Authorization', 'Bearer ']]],
  ] as [string, [string, string][]][])('answers 401 Not authorised to %s', async (_label, headers) => {
    for (const path of ['/api/apis/oas/pets-oas/categories', '/api/apis/categories']) {
      const res = await admin.call('GET', path, { headers });
      expect(res.status).toBe(401);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Not authorised', Meta: null });
    }
  });

  it('refuses a repeated Authorization header', async () => {
    const res = await admin.call('GET', '/api/apis/categories', { headers: [bearer('lister'), bearer('nobody')] });
    expect(res.status).toBe(400);
    expect((res.json as { Message: string }).Message).toMatch(/more than once: authorization/);
  });

  it.each([
    ['a classic (non-OAS) API', 'toys-classic'],
    ['an unknown API', 'no-such-api'],
  ])('answers 404 API not found for %s', async (_label, id) => {
    const res = await admin.call('GET', `/api/apis/oas/${id}/categories`, { headers: [bearer('reader')] });
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ Status: 'Error', Message: 'API not found', Meta: null });
  });

  it.each(['..%2Fsecrets', '%2E%2E', 'a%00', 'caf%C3%A9'])('answers 400 to the id %s', async (id) => {
    const res = await admin.call('GET', `/api/apis/oas/${id}/categories`, { headers: [bearer('reader')] });
    expect(res.status).toBe(400);
    expect((res.json as { Message: string }).Message).toMatch(/apiId/);
  });

  it('answers 500 "Could not retrieve APIs" when the resources cannot be read', async () => {
    const down = await startAdmin(clusterDeps(namespace, redis, { resources: new KubernetesResourceStore(unreachableKubeConfig(), [namespace]) }).deps);
    try {
      for (const [path, who] of [['/api/apis/categories', 'lister'], ['/api/apis/oas/pets-oas/categories', 'reader']] as const) {
        const res = await down.call('GET', path, { headers: [bearer(who)] });
        expect(res.status).toBe(500);
        expect(res.json).toEqual({ Status: 'Error', Message: 'Could not retrieve APIs', Meta: null });
      }
    } finally {
      await down.close();
    }
  });

  it('answers 500 when the token cannot be reviewed', async () => {
    const down = await startAdmin(clusterDeps(namespace, redis, { bearer: new KubernetesBearerAuthenticator(unreachableKubeConfig()) }).deps);
    try {
      const res = await down.call('GET', '/api/apis/categories', { headers: [bearer('lister')] });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Could not check the credentials', Meta: null });
    } finally {
      await down.close();
    }
  });
});

describe('category reads of an api_id two ApiDefinitions claim', () => {
  let namespace: string;
  let redis: Redis;
  let admin: AdminServer;
  const tokens = { holderReader: '', copyReader: '', lister: '' };

  beforeAll(async () => {
    namespace = await createNamespace('admin-cats-dup');
    // The holder is the older; the copy, applied a second later (creationTimestamp counts
    // seconds), comes first by name and so first in the API server's list.
    await kubectl(['apply', '-f', '-'], { input: petsOasApi(`{ name: zz-holder, namespace: ${namespace} }`, 'dup-oas', ['served']) });
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await kubectl(['apply', '-f', '-'], { input: petsOasApi(`{ name: aa-copy, namespace: ${namespace} }`, 'dup-oas', ['copy-only']) });
    tokens.holderReader = await serviceAccountToken(namespace, 'holder-reader', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], resourceNames: ['zz-holder'], verbs: ['get'] }]);
    tokens.copyReader = await serviceAccountToken(namespace, 'copy-reader', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions'], resourceNames: ['aa-copy'], verbs: ['get'] }]);
    tokens.lister = await serviceAccountToken(namespace, 'lister', [{ apiGroups: ['gw.dev'], resources: ['apidefinitions', 'categories'], verbs: ['list'] }]);
    redis = await connected(testRedis());
    admin = await startAdmin(clusterDeps(namespace, redis).deps);
  });

  afterAll(async () => {
    await admin?.close();
    redis?.disconnect();
  });

  it("answers the holder's categories, to a reader of the holder, and not to a reader of the copy only", async () => {
    const path = '/api/apis/oas/dup-oas/categories';
    const holder = await admin.call('GET', path, { headers: [['Authorization', `Bearer ${tokens.holderReader}`]] });
    expect(holder.status).toBe(200);
    expect(holder.json).toEqual({ categories: ['served'] });
    expect((await admin.call('GET', path, { headers: [['Authorization', `Bearer ${tokens.copyReader}`]] })).status).toBe(403);
  });

  it("counts only the holder's categories", async () => {
    const res = await admin.call('GET', '/api/apis/categories', { headers: [['Authorization', `Bearer ${tokens.lister}`]] });
    expect(res.json).toEqual({ categories: [{ name: 'served', count: 1 }] });
  });
});
