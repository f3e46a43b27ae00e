import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { parse, parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import { PRODUCT_MAX_TAGS } from '../../../crds/schemas/portal-product.ts';
import { StaticBearerAuthenticator } from '../../../sidecar/admin/bearer.ts';
import { FolderResourceStore } from '../../../sidecar/resources/folder-store.ts';
import { json, jsonType, startAdmin, type AdminServer } from './admin-client.ts';
import { ADMIN_SECRET, clusterDeps, connected, petsOasApi, PORTAL_SECRET, testRedis, type TestDeps } from './fixtures.ts';

const apis = `# two APIs in one file
${petsOasApi('{ name: pets }', 'pets', ['animals'])}---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata:
  name: toys # stays
spec:
  api_id: toys
  categories: [animals, fun]
  use_keyless: true
  proxy: { listen_path: /toys/, target_url: http://127.0.0.1:9000 }
`;

const product = `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: starter
spec:
  id: prod-1
  tags: []
`;

const category = `apiVersion: gw.dev/v1alpha1
kind: Category
metadata:
  name: internal
`;

const threePerSecond = { rate: 3, per: 1, access_rights: { toys: { api_id: 'toys' } } };

describe('admin operations on a --config folder (standalone)', () => {
  let dir: string;
  let redis: Redis;
  let admin: AdminServer;
  let test: TestDeps;
  const folderText = async (): Promise<string> =>
    (await Promise.all((await readdir(dir)).sort().map((name) => readFile(join(dir, name), 'utf8')))).join('\n');

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-admin-folder-'));
    await writeFile(join(dir, 'apis.yaml'), apis);
    await writeFile(join(dir, 'product.yaml'), product);
    await writeFile(join(dir, 'category.yaml'), category);
    redis = await connected(testRedis());
    await redis.flushdb();
    test = clusterDeps('default', redis, {
      resources: new FolderResourceStore(dir, 'default'),
      bearer: new StaticBearerAuthenticator([
        { name: 'catalogue', token: 'catalogue-token-0123456789', permissions: ['get:apidefinitions', 'list:apidefinitions', 'list:categories'] },
        { name: 'weak', token: 'weak-token-0123456789', permissions: ['get:categories'] },
      ]),
    });
    admin = await startAdmin(test.deps);
  });

  afterAll(async () => {
    await admin?.close();
    await redis?.flushdb();
    redis?.disconnect();
    await rm(dir, { recursive: true, force: true });
  });

  it('creates a key: its own Key file with the hash, the session in Redis, no raw key in the folder', async () => {
    const res = await admin.call('POST', '/admin/org/keys', { headers: [['Admin-Auth', ADMIN_SECRET], jsonType], body: json(threePerSecond) });
    expect(res.status).toBe(200);
    const { key_id: rawKey, key_hash: hash, data } = res.json as { key_id: string; key_hash: string; data: { key_id: string } };
    const file = parse(await readFile(join(dir, `key-${data.key_id}.yaml`), 'utf8'));
    expect(file).toEqual({
      apiVersion: 'gw.dev/v1alpha1',
      kind: 'Key',
      metadata: { name: data.key_id, namespace: 'default' },
      spec: { ...threePerSecond, key_hash: hash },
    });
    expect(await redis.exists(sessionKey(hash))).toBe(1);
    expect(await folderText()).not.toContain(rawKey);
  });

  it('refuses a key that grants no API: 400, no Key file, no session', async () => {
    const files = (await readdir(dir)).sort();
    const sessions = await redis.dbsize();
    const res = await admin.call('POST', '/admin/org/keys', { headers: [['Admin-Auth', ADMIN_SECRET], jsonType], body: json({ rate: 3, per: 1 }) });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ Status: 'Error', Message: 'Failed to create key, keys must have at least one Access Rights record set.', Meta: null });
    expect((await readdir(dir)).sort()).toEqual(files);
    expect(await redis.dbsize()).toBe(sessions);
  });

  it('tags a product in its file, once', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await admin.call('POST', '/portal-api/products/prod-1/tags', { headers: [['Authorization', PORTAL_SECRET], jsonType], body: json({ Name: 'new' }) });
      expect(res.status).toBe(200);
      expect(res.json).toEqual({ Name: 'new' });
    }
    expect(parse(await readFile(join(dir, 'product.yaml'), 'utf8')).spec.tags).toEqual([{ Name: 'new' }]);
  });

  it("writes strings a YAML 1.1 reader (kubectl's) would take for booleans quoted: a Key's alias, a product's tag", async () => {
    const res = await admin.call('POST', '/admin/org/keys', { headers: [['Admin-Auth', ADMIN_SECRET], jsonType], body: json({ ...threePerSecond, alias: 'yes', tags: ['on', 'n'] }) });
    expect(res.status).toBe(200);
    const text = await readFile(join(dir, `key-${(res.json as { data: { key_id: string } }).data.key_id}.yaml`), 'utf8');
    for (const version of ['1.1', '1.2'] as const) expect(parse(text, { version }).spec).toMatchObject({ alias: 'yes', tags: ['on', 'n'] });

    const tagged = await admin.call('POST', '/portal-api/products/prod-1/tags', { headers: [['Authorization', PORTAL_SECRET], jsonType], body: json({ Name: 'off' }) });
    expect(tagged.status).toBe(200);
    const product = await readFile(join(dir, 'product.yaml'), 'utf8');
    for (const version of ['1.1', '1.2'] as const) expect((parse(product, { version }) as { spec: { tags: unknown[] } }).spec.tags).toContainEqual({ Name: 'off' });
  });

  it('refuses a tag past the most a product may have, in the portal shape, and leaves its file as it was', async () => {
    const tags = Array.from({ length: PRODUCT_MAX_TAGS }, (_, i) => `    - Name: t${i}`).join('\n');
    const text = `apiVersion: gw.dev/v1alpha1\nkind: PortalProduct\nmetadata:\n  name: full\nspec:\n  id: prod-full\n  tags:\n${tags}\n`;
    await writeFile(join(dir, 'full-product.yaml'), text);
    try {
      const res = await admin.call('POST', '/portal-api/products/prod-full/tags', { headers: [['Authorization', PORTAL_SECRET], jsonType], body: json({ Name: 'one-more' }) });
      expect(res.status).toBe(409);
      expect(res.json).toEqual({ errors: [`Product has as many tags as a product may have: ${PRODUCT_MAX_TAGS} tags`] });
      expect(await readFile(join(dir, 'full-product.yaml'), 'utf8')).toBe(text);
    } finally {
      await rm(join(dir, 'full-product.yaml'));
    }
  });

  it('reads categories with static tokens', async () => {
    const catalogue: [string, string] = ['Authorization', 'Bearer catalogue-token-0123456789'];
    const one = await admin.call('GET', '/api/apis/oas/pets/categories', { headers: [catalogue] });
    expect(one.status).toBe(200);
    expect(one.json).toEqual({ categories: ['animals'] });
    const all = await admin.call('GET', '/api/apis/categories', { headers: [catalogue] });
    expect(all.json).toEqual({
      categories: [
        { name: 'animals', count: 2 },
        { name: 'fun', count: 1 },
        { name: 'internal', count: 0 },
      ],
    });
    const weak = await admin.call('GET', '/api/apis/categories', { headers: [['Authorization', 'Bearer weak-token-0123456789']] });
    expect(weak.status).toBe(403);
    const unknown = await admin.call('GET', '/api/apis/categories', { headers: [['Authorization', 'Bearer catalogue-token-01234567890']] });
    expect(unknown.status).toBe(401);
  });

  it('answers the category reads 500 while the file of an API does not parse: the gateway serves its last good version', async () => {
    const catalogue: [string, string] = ['Authorization', 'Bearer catalogue-token-0123456789'];
    const good = await readFile(join(dir, 'apis.yaml'), 'utf8');
    // Broken in its own document (read as in no document), or in another of its file.
    for (const broken of [`broken: [\n${good}`, `${good}\n  broken: [\n`]) {
      await writeFile(join(dir, 'apis.yaml'), broken);
      try {
        for (const path of ['/api/apis/oas/pets/categories', '/api/apis/categories']) {
          const res = await admin.call('GET', path, { headers: [catalogue] });
          expect(res.status).toBe(500);
          expect(res.json).toEqual({ Status: 'Error', Message: 'Could not retrieve APIs', Meta: null });
        }
      } finally {
        await writeFile(join(dir, 'apis.yaml'), good);
      }
    }
    expect((await admin.call('GET', '/api/apis/oas/pets/categories', { headers: [catalogue] })).json).toEqual({ categories: ['animals'] });
  });

  it('deletes an API document from its file; the gateway reloads only on /gw/reload', async () => {
    const res = await admin.call('DELETE', '/gw/apis/pets', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ key: 'pets', status: 'ok', action: 'deleted' });
    const text = await readFile(join(dir, 'apis.yaml'), 'utf8');
    expect(parseAllDocuments(text).map((d) => (d.toJS() as { spec: { api_id: string } }).spec.api_id)).toEqual(['toys']);
    expect(text).toContain('# stays');
    expect(test.reloads.count).toBe(0);

    const reload = await admin.call('GET', '/gw/reload', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
    expect(reload.status).toBe(200);
    expect(test.reloads.count).toBe(1);
    const gone = await admin.call('DELETE', '/gw/apis/pets', { headers: [['X-GW-Authorization', ADMIN_SECRET]] });
    expect(gone.status).toBe(404);
  });

  it('rolls the session back when the Key file cannot be written', async () => {
    const before = await redis.dbsize();
    const missing = await startAdmin(clusterDeps('default', redis, { resources: new FolderResourceStore(join(dir, 'missing'), 'default') }).deps);
    try {
      const res = await missing.call('POST', '/admin/org/keys', { headers: [['Admin-Auth', ADMIN_SECRET], jsonType], body: json(threePerSecond) });
      expect(res.status).toBe(500);
      expect(res.json).toEqual({ Status: 'Error', Message: 'Failed to create key, save of the new session failed', Meta: null });
      expect(await redis.dbsize()).toBe(before);
    } finally {
      await missing.close();
    }
  });
});
