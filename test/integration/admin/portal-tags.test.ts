import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kinds } from '../../../crds/kinds.ts';
import { PRODUCT_MAX_TAGS } from '../../../crds/schemas/portal-product.ts';
import { KubernetesResourceStore } from '../../../sidecar/resources/kubernetes-store.ts';
import { createNamespace, kubectl } from '../../harness/index.ts';
import { json, jsonType, startAdmin, type AdminServer } from './admin-client.ts';
import { clusterDeps, connected, listCustom, PORTAL_SECRET, testRedis, unreachableKubeConfig } from './fixtures.ts';

const auth: [string, string] = ['Authorization', PORTAL_SECRET];

interface Refusal {
  label: string;
  id: string;
  headers: [string, string][];
  body: string | Buffer;
  status: number;
  message: RegExp;
}

const refusal = (...[label, id, headers, body, status, message]: [string, string, [string, string][], string | Buffer, number, RegExp]): Refusal => ({
  label,
  id,
  headers,
  body,
  status,
  message,
});

const product = (namespace: string): string => `
apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: starter-plan
  namespace: ${namespace}
spec:
  id: prod-1
  name: Starter
  tags:
    - Name: existing
`;

describe('POST /portal-api/products/{product_id}/tags on the API server', () => {
  let namespace: string;
  let redis: Redis;
  let admin: AdminServer;

  const productState = async (): Promise<{ tags: unknown; resourceVersion: string }> => {
    const item = (await listCustom(namespace, kinds.PortalProduct.plural)).find((listed) => listed.metadata.name === 'starter-plan');
    return { tags: item!.spec.tags, resourceVersion: item!.metadata.resourceVersion };
  };

  beforeAll(async () => {
    namespace = await createNamespace('admin-tags');
    await kubectl(['apply', '-f', '-'], { input: product(namespace) });
    redis = await connected(testRedis());
    admin = await startAdmin(clusterDeps(namespace, redis).deps);
  });

  afterAll(async () => {
    await admin?.close();
    redis?.disconnect();
  });

  it('adds a tag by product id and answers {Name}', async () => {
    const res = await admin.call('POST', '/portal-api/products/prod-1/tags', { headers: [auth, jsonType], body: json({ Name: 'beta' }) });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ Name: 'beta' });
    expect((await productState()).tags).toEqual([{ Name: 'existing' }, { Name: 'beta' }]);
  });

  it('does not duplicate an existing tag and writes nothing for it', async () => {
    const before = await productState();
    const res = await admin.call('POST', '/portal-api/products/prod-1/tags', { headers: [auth, jsonType], body: json({ Name: 'beta' }) });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ Name: 'beta' });
    expect(await productState()).toEqual(before);
  });

  it('finds a product by metadata.name too, and keeps unicode tags', async () => {
    const res = await admin.call('POST', '/portal-api/products/starter-plan/tags', {
      headers: [auth, jsonType],
      body: json({ Name: 'café ☕' }),
    });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ Name: 'café ☕' });
    expect((await productState()).tags).toEqual([{ Name: 'existing' }, { Name: 'beta' }, { Name: 'café ☕' }]);
  });

  it('refuses a tag past the most a product may have (409, portal shape) and writes nothing; a tag it has still answers 200', async () => {
    const full = await createNamespace('admin-tags-full');
    const tags = Array.from({ length: PRODUCT_MAX_TAGS }, (_, i) => ({ Name: `t${i}` }));
    const manifest = { apiVersion: 'gw.dev/v1alpha1', kind: 'PortalProduct', metadata: { name: 'full-plan', namespace: full }, spec: { id: 'prod-full', tags } };
    expect((await kubectl(['apply', '-f', '-'], { input: JSON.stringify(manifest) })).code).toBe(0);
    const fullAdmin = await startAdmin(clusterDeps(full, redis).deps);
    try {
      const before = (await listCustom(full, kinds.PortalProduct.plural))[0]!;
      const refused = await fullAdmin.call('POST', '/portal-api/products/prod-full/tags', { headers: [auth, jsonType], body: json({ Name: 'one-more' }) });
      expect(refused.status).toBe(409);
      expect(refused.json).toEqual({ errors: [`Product has as many tags as a product may have: ${PRODUCT_MAX_TAGS} tags`] });
      expect(refused.headers['x-gw-error-code']).toBe('product_tags_full');
      const had = await fullAdmin.call('POST', '/portal-api/products/prod-full/tags', { headers: [auth, jsonType], body: json({ Name: 't0' }) });
      expect(had.status).toBe(200);
      const after = (await listCustom(full, kinds.PortalProduct.plural))[0]!;
      expect(after.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
      expect(after.spec.tags).toEqual(tags);
    } finally {
      await fullAdmin.close();
    }
  });

  it('keeps every tag of concurrent requests to two gateways (one at a time in each, conflicts between them retried)', async () => {
    const other = await startAdmin(clusterDeps(namespace, redis).deps);
    try {
      const names = Array.from({ length: 24 }, (_, i) => `c${i}`);
      const results = await Promise.all(
        names.map((Name, i) => (i % 2 === 0 ? admin : other).call('POST', '/portal-api/products/prod-1/tags', { headers: [auth, jsonType], body: json({ Name }) })),
      );
      expect(results.map((r) => r.status)).toEqual(names.map(() => 200));
      const tags = ((await productState()).tags as { Name: string }[]).map((t) => t.Name);
      expect(tags.filter((t) => names.includes(t)).sort()).toEqual([...names].sort());
    } finally {
      await other.close();
    }
  });

  const refusals: Refusal[] = [
    refusal('no Authorization', 'prod-1', [jsonType], json({ Name: 'x' }), 401, /Not authorised/),
    refusal('a wrong key', 'prod-1', [['Authorization', 'nope'], jsonType], json({ Name: 'x' }), 401, /Not authorised/),
    refusal('a Bearer-prefixed key (raw value expected)', 'prod-1', [['Authorization', `Bearer ${PORTAL_SECRET}`], jsonType], json({ Name: 'x' }), 401, /Not authorised/),
    refusal('Authorization twice', 'prod-1', [auth, ['Authorization', 'other'], jsonType], json({ Name: 'x' }), 400, /more than once/),
    refusal('an unknown product', 'nope', [auth, jsonType], json({ Name: 'x' }), 404, /^Product not found$/),
    refusal('a traversal id', '..%2F..%2Fetc', [auth, jsonType], json({ Name: 'x' }), 400, /product_id/),
    refusal('a dot-dot id', '..', [auth, jsonType], json({ Name: 'x' }), 400, /product_id/),
    refusal('an encoded NUL in the id', 'prod-1%00', [auth, jsonType], json({ Name: 'x' }), 400, /product_id/),
    refusal('a unicode id', 'pr%C3%B6d', [auth, jsonType], json({ Name: 'x' }), 400, /product_id/),
    refusal('an empty body', 'prod-1', [auth, jsonType], '', 400, /^Request body empty$/),
    refusal('malformed JSON', 'prod-1', [auth, jsonType], '{"Name":', 400, /not valid JSON/),
    refusal('a missing Name', 'prod-1', [auth, jsonType], json({}), 400, /Name/),
    refusal('an empty Name', 'prod-1', [auth, jsonType], json({ Name: '' }), 400, /Name/),
    refusal('a blank Name', 'prod-1', [auth, jsonType], json({ Name: ' \t ' }), 400, /Name.*blank/),
    refusal('a numeric Name', 'prod-1', [auth, jsonType], json({ Name: 7 }), 400, /Name/),
    refusal('a 64-character Name', 'prod-1', [auth, jsonType], json({ Name: 'x'.repeat(64) }), 400, /Name/),
    refusal('a control character', 'prod-1', [auth, jsonType], json({ Name: 'a\u0007b' }), 400, /^Invalid request body: Name: must not contain control characters$/),
    refusal('a lone surrogate', 'prod-1', [auth, jsonType], '{"Name":"a\\ud800"}', 400, /^Invalid request body: Name: must not contain unpaired surrogates$/),
    refusal('an extra field', 'prod-1', [auth, jsonType], json({ Name: 'x', Colour: 'red' }), 400, /Colour/),
    refusal('a form body', 'prod-1', [auth, ['Content-Type', 'application/x-www-form-urlencoded']], 'Name=x', 415, /application\/json/),
    refusal('invalid UTF-8', 'prod-1', [auth, jsonType], Buffer.from([0x7b, 0x22, 0x4e, 0xc3, 0x28, 0x22, 0x7d]), 400, /UTF-8/),
    refusal('a 2 MiB body', 'prod-1', [auth, jsonType], json({ Name: 'x'.repeat(2 * 1024 * 1024) }), 413, /^Request body too large: at most 1048576 bytes$/),
  ];

  it.each(refusals)('refuses $label in the portal shape and changes nothing', async ({ id, headers, body, status, message }) => {
    const before = await productState();
    const res = await admin.call('POST', `/portal-api/products/${id}/tags`, { headers, body });
    expect(res.status).toBe(status);
    expect(res.json).toEqual({ errors: [expect.stringMatching(message)] });
    expect(await productState()).toEqual(before);
  });

  it('tags the oldest of two products sharing an id, though the newer comes first by name', async () => {
    const twin = (name: string): string => `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata: { name: ${name}, namespace: ${namespace} }
spec: { id: twin-id }
`;
    await kubectl(['apply', '-f', '-'], { input: twin('zz-older') });
    // Creation times are in seconds.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await kubectl(['apply', '-f', '-'], { input: twin('aa-newer') });
    const res = await admin.call('POST', '/portal-api/products/twin-id/tags', { headers: [auth, jsonType], body: json({ Name: 'to-the-older' }) });
    expect(res.status).toBe(200);
    const items = await listCustom(namespace, kinds.PortalProduct.plural);
    const tagsOf = (name: string) => items.find((item) => item.metadata.name === name)?.spec.tags;
    expect(tagsOf('zz-older')).toEqual([{ Name: 'to-the-older' }]);
    expect(tagsOf('aa-newer')).toEqual([]);
  });

  it('answers 500 in the portal shape when the API server cannot be reached', async () => {
    const down = await startAdmin(clusterDeps(namespace, redis, { resources: new KubernetesResourceStore(unreachableKubeConfig(), [namespace]) }).deps);
    try {
      const res = await down.call('POST', '/portal-api/products/prod-1/tags', { headers: [auth, jsonType], body: json({ Name: 'x' }) });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ errors: ['Failed to add the tag'] });
    } finally {
      await down.close();
    }
  });
});
