import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import { compiledConfigSchema, type CompiledConfig } from '../../../crds/compiled.ts';
import type { KindName } from '../../../crds/kinds.ts';
import type { Operator } from '../../../operator/operator.ts';
import { retain } from '../../../sidecar/resources/retained-config-maps.ts';
import { createNamespace, kubeConfig, kubectl, testEnv } from '../../harness/index.ts';
import { client, ready, removeGwResources, startOperator, waitFor } from './support.ts';

const examplesDir = join(import.meta.dirname, '../../../examples');

interface ExampleObject {
  kind: KindName;
  name: string;
}

function exampleObjects(): ExampleObject[] {
  return readdirSync(examplesDir)
    .filter((f) => f.endsWith('.yaml'))
    .flatMap((f) => parseAllDocuments(readFileSync(join(examplesDir, f), 'utf8')).map((doc) => doc.toJS() as { kind: KindName; metadata: { name: string } } | null))
    .filter((o): o is { kind: KindName; metadata: { name: string } } => o !== null)
    .map((o) => ({ kind: o.kind, name: o.metadata.name }));
}

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

describe('operator: examples, configs, references, drift, keys', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let ns: string;
  let operator: Operator;
  let redis: Redis;

  const configOf = async (apiName: string): Promise<CompiledConfig | undefined> => {
    const cm = await c.configMap(ns, `gw-api-${apiName}`);
    const json = cm?.data?.['config.json'];
    return json ? compiledConfigSchema.parse(JSON.parse(json)) : undefined;
  };
  const waitReady = (kind: KindName, name: string, want = 'True', namespace = ns) =>
    waitFor(`${kind} ${name} Ready=${want}`, async () => {
      const obj = await c.get(kind, namespace, name);
      const cond = ready(obj);
      return cond?.status === want && obj?.status?.observedGeneration === obj?.metadata.generation ? obj : undefined;
    });
  const api = (name: string, apiId: string, extra: Record<string, unknown> = {}) =>
    c.create('ApiDefinition', ns, {
      metadata: { name },
      spec: { api_id: apiId, use_keyless: true, proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' }, ...extra },
    });

  /** The ConfigMap of an ApiDefinition per the contract: labels, owner, hash of its data, the API and its policies. */
  async function expectCompiledConfigMap(name: string): Promise<void> {
    const resource = (await c.get('ApiDefinition', ns, name))!;
    const status = resource.status ?? {};
    const cm = await c.configMap(ns, `gw-api-${name}`);
    expect(cm, `ConfigMap of ${name}`).toBeDefined();
    const meta = cm!.metadata!;
    expect(meta.labels).toMatchObject({ 'app.kubernetes.io/managed-by': 'gw-operator', 'gw.dev/api-id': status.api_id });
    expect(meta.ownerReferences?.[0]).toMatchObject({ kind: 'ApiDefinition', name, uid: resource.metadata.uid, controller: true });
    const json = cm!.data!['config.json']!;
    expect(meta.annotations?.['gw.dev/config-hash']).toBe(sha256(json));
    const config = compiledConfigSchema.parse(JSON.parse(json));
    expect(config.apis.map((a) => a.api_id)).toEqual([status.api_id]);
    expect(Object.keys(config.policies).sort()).toEqual(status.policies);
    expect(status.configMap).toBe(`gw-api-${name}`);
  }

  /** A kubectl-made Key: finalizer, raw key only in its Secret, hash in status, session in Redis. */
  async function expectGeneratedKey(name: string): Promise<void> {
    const key = (await c.get('Key', ns, name))!;
    expect(key.metadata.finalizers).toContain('gw.dev/key-session');
    const secret = await c.core.readNamespacedSecret({ namespace: ns, name: `gw-key-${name}` });
    const raw = Buffer.from(secret.data!.key!, 'base64').toString('utf8');
    expect(raw).toMatch(/^[0-9a-f]{64}$/);
    expect(key.status?.key_hash).toBe(sha256(raw));
    expect(key.status?.secretName).toBe(`gw-key-${name}`);
    expect(JSON.stringify(key.status)).not.toContain(raw);
    const session = JSON.parse((await redis.get(sessionKey(sha256(raw))))!) as { namespace: string; apply_policies: string[] };
    expect(session.namespace).toBe(ns);
    expect(session.apply_policies).toEqual(key.spec.apply_policies);
  }

  beforeAll(async () => {
    ns = await createNamespace('operator');
    redis = new Redis(testEnv().redisUrl);
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns });
  });

  afterAll(async () => {
    await removeGwResources(kc, ns);
    await operator?.stop();
    redis?.disconnect();
  });

  it('every example reaches Ready=True, each API with its compiled ConfigMap, each key with its session', async () => {
    const applied = await kubectl(['apply', '-n', ns, '-f', examplesDir]);
    expect(applied.code, applied.stderr).toBe(0);
    const objects = exampleObjects();
    expect(objects.length).toBeGreaterThan(10);
    for (const { kind, name } of objects) await waitReady(kind, name);

    for (const { name } of objects.filter((o) => o.kind === 'ApiDefinition')) await expectCompiledConfigMap(name);
    for (const { name } of objects.filter((o) => o.kind === 'Key')) await expectGeneratedKey(name);
    const gold = await c.get('Policy', ns, 'gold');
    expect(gold?.status?.keys).toBe(1);
    expect(gold?.status?.apis).toEqual(['auth-token-api']);
    expect((await c.get('Category', ns, 'public'))?.status?.apis).toBe(2);
    expect((await c.get('Category', ns, 'payments'))?.status?.apis).toBe(1);
    expect((await c.get('PortalProduct', ns, 'starter'))?.status?.tags).toBe(1);
    // kubectl's table shows what the gateways serve, an OAS API's listen path and limit too.
    const table = (await kubectl(['get', 'gwapi', '-n', ns, '-o', 'wide'])).stdout.split('\n');
    expect(table[0]).toMatch(/^NAME\s+API ID\s+LISTEN PATH\s+RATE LIMIT\s+READY\s+REASON\s+AGE$/);
    expect(table).toEqual(expect.arrayContaining([
      expect.stringMatching(/^auth-token-api\s+auth-token-api\s+\/auth\/\s+100\/60s\s+True\s+Compiled\s/),
      expect.stringMatching(/^oas-api\s+oas-api\s+\/oas\/\s+60\/60s\s+True\s+Compiled\s/),
      expect.stringMatching(/^billing-api\s+billing-api\s+\/billing\/\s+none\s+True\s+Compiled\s/),
    ]));
    const events = await kubectl(['get', 'events', '-n', ns, '--field-selector', 'involvedObject.name=keyless-api', '-o', 'json']);
    const written = (JSON.parse(events.stdout) as { items: Array<{ reason: string; reportingComponent: string; action: string }> }).items;
    expect(written.map((e) => `${e.reportingComponent}/${e.action}/${e.reason}`)).toContain('gw.dev/operator/Reconcile/ConfigWritten');
  });

  it("kubectl's tables show a Category's name and a PortalProduct's id where they default to the resource's name", async () => {
    await c.create('Category', ns, { metadata: { name: 'unnamed-category' }, spec: {} });
    await c.create('PortalProduct', ns, { metadata: { name: 'unnumbered-product' }, spec: {} });
    await waitReady('Category', 'unnamed-category');
    await waitReady('PortalProduct', 'unnumbered-product');
    const categories = (await kubectl(['get', 'gwcat', '-n', ns])).stdout.split('\n');
    expect(categories[0]).toMatch(/^NAME\s+CATEGORY\s+APIS\s+READY\s+AGE$/);
    expect(categories).toEqual(expect.arrayContaining([expect.stringMatching(/^unnamed-category\s+unnamed-category\s+0\s+True\s/)]));
    const products = (await kubectl(['get', 'gwprod', '-n', ns])).stdout.split('\n');
    expect(products[0]).toMatch(/^NAME\s+ID\s+PRODUCT\s+TAGS\s+READY\s+AGE$/);
    expect(products).toEqual(expect.arrayContaining([expect.stringMatching(/^unnumbered-product\s+unnumbered-product\s+0\s+True\s/)]));
  });

  it('takes every name the API server takes: the objects named after them, their labels and statuses fit', async () => {
    // The longest of each: ApiDefinitions and Keys leave room for the gw-api-/gw-key- prefix.
    const longest = (prefix: string, length: number): string => `${prefix}-${'n'.repeat(length - prefix.length - 1)}`;
    const [apiName, keyName] = [longest('api', 246), longest('key', 246)];
    const [policyName, categoryName, productName] = [longest('policy', 253), longest('category', 253), longest('product', 253)];
    await api(apiName, 'long-names-api');
    await c.create('Policy', ns, { metadata: { name: policyName }, spec: { rate: 5, per: 60, access_rights: { 'long-names-api': {} } } });
    await c.create('Key', ns, { metadata: { name: keyName }, spec: { apply_policies: [policyName] } });
    await c.create('Category', ns, { metadata: { name: categoryName }, spec: {} });
    await c.create('PortalProduct', ns, { metadata: { name: productName }, spec: {} });

    const served = await waitFor('the API compiled with the Policy', async () => {
      const obj = await waitReady('ApiDefinition', apiName);
      return Array.isArray(obj.status?.policies) && obj.status.policies.length === 1 ? obj : undefined;
    });
    expect(served.status?.policies).toEqual([`${ns}/${policyName}`]);
    await expectCompiledConfigMap(apiName);
    await waitReady('Policy', policyName);
    expect((await waitReady('Key', keyName)).status?.policies).toEqual([`${ns}/${policyName}`]);
    await expectGeneratedKey(keyName);
    // Too long for a label value, the Key's name is labelled by its hash.
    const secret = await c.core.readNamespacedSecret({ namespace: ns, name: `gw-key-${keyName}` });
    expect(secret.metadata?.labels?.['gw.dev/key']).toMatch(/^h-[0-9a-f]{40}$/);
    expect((await waitReady('Category', categoryName)).status?.name).toBe(categoryName);
    expect((await waitReady('PortalProduct', productName)).status?.id).toBe(productName);

    // A Secret of the Key's deleted by hand is made again: the Secret is traced back to its Key.
    await c.core.deleteNamespacedSecret({ namespace: ns, name: `gw-key-${keyName}` });
    await waitFor('the Secret made again', async () => (await c.core.readNamespacedSecret({ namespace: ns, name: `gw-key-${keyName}` }).catch(() => undefined))?.data?.key);
  });

  it('lists every Policy granting an API in its status, past the 256 it once stopped at', async () => {
    await api('crowded-grants', 'crowded-grants-api');
    const policies = Array.from({ length: 300 }, (_, i) => ({
      apiVersion: 'gw.dev/v1alpha1',
      kind: 'Policy',
      metadata: { name: `grant-${i}` },
      spec: { rate: 5, per: 60, access_rights: { 'crowded-grants-api': {} } },
    }));
    await kubectl(['apply', '-n', ns, '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: policies }) });
    const listed = await waitFor('all 300 in the status', async () => {
      const obj = await c.get('ApiDefinition', ns, 'crowded-grants');
      return Array.isArray(obj?.status?.policies) && obj.status.policies.length === 300 ? obj.status.policies : undefined;
    }, 60_000);
    expect(new Set(listed)).toEqual(new Set(policies.map((p) => `${ns}/${p.metadata.name}`)));
    await expectCompiledConfigMap('crowded-grants');
    await kubectl(['delete', 'policies', '-n', ns, ...policies.map((p) => p.metadata.name), '--wait=false']);
  });

  it('an edited policy changes the config of every API it grants, and of the ones it stopped granting', async () => {
    const ids = [`${ns}-edit-a`, `${ns}-edit-b`];
    await api('edit-a', ids[0]!);
    await api('edit-b', ids[1]!);
    await c.create('Policy', ns, { metadata: { name: 'edit-policy' }, spec: { rate: 10, per: 60, access_rights: { [ids[0]!]: {}, [ids[1]!]: {} } } });
    const policyId = `${ns}/edit-policy`;
    for (const name of ['edit-a', 'edit-b']) {
      await waitFor(`${name} config with rate 10`, async () => (await configOf(name))?.policies[policyId]?.rate?.rate === 10);
    }
    const hashBefore = (await c.configMap(ns, 'gw-api-edit-a'))?.metadata?.annotations?.['gw.dev/config-hash'];
    await c.replaceSpec('Policy', ns, 'edit-policy', { rate: 25, per: 60, access_rights: { [ids[0]!]: {}, [ids[1]!]: {} } });
    for (const name of ['edit-a', 'edit-b']) {
      await waitFor(`${name} config with rate 25`, async () => (await configOf(name))?.policies[policyId]?.rate?.rate === 25);
    }
    expect((await c.configMap(ns, 'gw-api-edit-a'))?.metadata?.annotations?.['gw.dev/config-hash']).not.toBe(hashBefore);
    await c.replaceSpec('Policy', ns, 'edit-policy', { rate: 25, per: 60, access_rights: { [ids[0]!]: {} } });
    await waitFor('edit-b config without the policy', async () => {
      const config = await configOf('edit-b');
      return config !== undefined && !(policyId in config.policies);
    });
    await waitFor('edit-b status without the policy', async () => JSON.stringify((await c.get('ApiDefinition', ns, 'edit-b'))?.status?.policies) === '[]');
    expect((await configOf('edit-a'))?.policies[policyId]?.rate?.rate).toBe(25);
  });

  it("a policy edit the compile step refuses leaves the policy's last compiled version in its APIs' ConfigMaps", async () => {
    const apiId = `${ns}-typo`;
    await api('typo', apiId);
    const spec = (path: string, rate: number) => ({ rate, per: 60, access_rights: { [apiId]: { endpoints: [{ path, methods: [{ name: 'GET', limit: { rate: 2, per: 60 } }] }] } } });
    await c.create('Policy', ns, { metadata: { name: 'typo-policy' }, spec: spec('/limited', 10) });
    const policyId = `${ns}/typo-policy`;
    await waitFor('the endpoint limit compiled', async () => (await configOf('typo'))?.policies[policyId]?.access_rights[apiId]?.endpoints.length === 1);

    await c.replaceSpec('Policy', ns, 'typo-policy', spec('/limited([', 50));
    expect(ready(await waitReady('Policy', 'typo-policy', 'False'))?.reason).toBe('InvalidRegex');
    // An edit of the API itself makes the operator write its ConfigMap again, with the bad policy in its cache.
    await c.replaceSpec('ApiDefinition', ns, 'typo', { api_id: apiId, name: 'Typo renamed', use_keyless: true, proxy: { listen_path: '/typo/', target_url: 'http://127.0.0.1:9000' } });
    await waitFor('the API renamed in its ConfigMap', async () => (await configOf('typo'))?.apis[0]?.name === 'Typo renamed');
    const kept = (await configOf('typo'))?.policies[policyId];
    expect(kept?.rate?.rate).toBe(10);
    expect(kept?.access_rights[apiId]?.endpoints.map((e) => e.path)).toEqual(['/limited']);

    await c.replaceSpec('Policy', ns, 'typo-policy', spec('/limited/.*', 50));
    await waitFor('the fixed policy compiled', async () => (await configOf('typo'))?.policies[policyId]?.rate?.rate === 50);
    await waitReady('Policy', 'typo-policy');
  });

  it('invalid references give Ready=False with the reason; deleting a granted API succeeds and flips the policies and keys granted it', async () => {
    await c.create('Policy', ns, { metadata: { name: 'orphan' }, spec: { rate: 1, per: 1, access_rights: { 'no-such-api': {} } } });
    const orphan = await waitReady('Policy', 'orphan', 'False');
    expect(ready(orphan)?.reason).toBe('MissingApi');
    expect(ready(orphan)?.message).toContain('no-such-api');

    await c.create('Key', ns, { metadata: { name: 'lost-key' }, spec: { apply_policies: ['nope'] } });
    const lost = await waitReady('Key', 'lost-key', 'False');
    expect(ready(lost)?.reason).toBe('MissingPolicy');
    expect(ready(lost)?.message).toContain('nope');

    await api('bad-regex', `${ns}-bad-regex`, { use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/users/([0-9', method: 'GET', rate: 1, per: 1 }] } });
    const bad = await waitReady('ApiDefinition', 'bad-regex', 'False');
    expect(ready(bad)?.reason).toBe('InvalidRegex');
    expect(await c.configMap(ns, 'gw-api-bad-regex')).toBeUndefined();

    const doomedId = `${ns}-doomed`;
    // A Key applied before the API it is granted (one `kubectl apply -f` of a folder) turns Ready when the API appears.
    await c.create('Key', ns, { metadata: { name: 'early-key' }, spec: { rate: 5, per: 1, access_rights: { [doomedId]: {} } } });
    const early = await waitReady('Key', 'early-key', 'False');
    expect(ready(early)?.reason).toBe('MissingApi');
    expect(ready(early)?.message).toBe(`access_rights names api_id "${doomedId}", not an ApiDefinition`);
    await api('doomed', doomedId);
    await c.create('Policy', ns, { metadata: { name: 'grants-doomed' }, spec: { rate: 5, per: 1, access_rights: { [doomedId]: {} } } });
    await waitReady('Policy', 'grants-doomed');
    await waitReady('Key', 'early-key');
    await waitFor('doomed ConfigMap', () => c.configMap(ns, 'gw-api-doomed'));
    await c.remove('ApiDefinition', ns, 'doomed');
    await waitFor('doomed gone', async () => (await c.get('ApiDefinition', ns, 'doomed')) === undefined, 10_000);
    const flipped = await waitReady('Policy', 'grants-doomed', 'False');
    expect(ready(flipped)?.reason).toBe('MissingApi');
    expect(ready(await waitReady('Key', 'early-key', 'False'))?.reason).toBe('MissingApi');
    await waitFor('doomed ConfigMap deleted', async () => (await c.configMap(ns, 'gw-api-doomed')) === undefined);

    const events = await kubectl(['get', 'events', '-n', ns, '--field-selector', 'involvedObject.name=orphan', '-o', 'json']);
    const reasons = (JSON.parse(events.stdout) as { items: Array<{ reason: string; type: string }> }).items.map((e) => `${e.type}/${e.reason}`);
    expect(reasons).toContain('Warning/MissingApi');
  });

  it('reports a config too large for one ConfigMap instead of truncating it', async () => {
    const apiId = `${ns}-huge`;
    const blob = 'x'.repeat(100_000);
    for (let i = 0; i < 10; i += 1) {
      await c.create('Policy', ns, { metadata: { name: `huge-${i}` }, spec: { rate: 1, per: 1, meta_data: { blob }, access_rights: { [apiId]: {} } } });
    }
    for (let i = 0; i < 10; i += 1) await waitReady('Policy', `huge-${i}`, 'False');
    await api('huge', apiId);
    const huge = await waitReady('ApiDefinition', 'huge', 'False');
    expect(ready(huge)?.reason).toBe('ConfigTooLarge');
    expect(ready(huge)?.message).toMatch(/compiled config is \d+ bytes, over the 921600-byte limit/);
    expect(await c.configMap(ns, 'gw-api-huge')).toBeUndefined();
    // Nothing is served: the status names no ConfigMap and no Policy in force, and the Policies say they are not.
    expect(huge.status).not.toHaveProperty('configMap');
    expect(huge.status).not.toHaveProperty('policies');
    const policy = await waitFor('huge-0 NotInForce', async () => {
      const found = await c.get('Policy', ns, 'huge-0');
      return ready(found)?.reason === 'NotInForce' ? found : undefined;
    });
    expect(ready(policy)?.message).toBe(`not in force on api_id "${apiId}": ApiDefinition ${ns}/huge is ConfigTooLarge and has never been served`);
    for (let i = 0; i < 10; i += 1) await c.remove('Policy', ns, `huge-${i}`);
    await waitReady('ApiDefinition', 'huge', 'True');
    expect(await c.configMap(ns, 'gw-api-huge')).toBeDefined();
  });

  it('restores a compiled ConfigMap edited or deleted by hand', async () => {
    await api('drift', `${ns}-drift`);
    const original = (await waitFor('drift ConfigMap', () => c.configMap(ns, 'gw-api-drift')))!.data!['config.json'];
    await kubectl(['patch', 'configmap', 'gw-api-drift', '-n', ns, '--type', 'merge', '-p', JSON.stringify({ data: { 'config.json': '{"hacked":true}' } })]);
    await waitFor('edited ConfigMap restored', async () => (await c.configMap(ns, 'gw-api-drift'))?.data?.['config.json'] === original);
    const deleted = await kubectl(['delete', 'configmap', 'gw-api-drift', '-n', ns]);
    expect(deleted.code).toBe(0);
    await waitFor('deleted ConfigMap restored', async () => (await c.configMap(ns, 'gw-api-drift'))?.data?.['config.json'] === original);
  });

  it('leaves a ConfigMap retained by the admin DELETE alone while its API is gone', async () => {
    await api('retained', `${ns}-retained`);
    const cm = await waitFor('retained ConfigMap', () => c.configMap(ns, 'gw-api-retained'));
    const patched = await kubectl([
      'patch', 'configmap', 'gw-api-retained', '-n', ns, '--type', 'json', '-p',
      JSON.stringify([
        { op: 'add', path: '/metadata/annotations/gw.dev~1retain-until-reload', value: 'true' },
        { op: 'remove', path: '/metadata/ownerReferences' },
      ]),
    ]);
    expect(patched.code, patched.stderr).toBe(0);
    await c.remove('ApiDefinition', ns, 'retained');
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const after = await c.configMap(ns, 'gw-api-retained');
    expect(after?.data).toEqual(cm.data);
    expect(after?.metadata?.annotations?.['gw.dev/retain-until-reload']).toBe('true');
  });

  it('takes a ConfigMap retained by the admin DELETE back at once for an ApiDefinition created again under its name', async () => {
    await api('reborn', `${ns}-reborn`, { global_rate_limit: { rate: 5, per: 60 } });
    await waitFor('reborn ConfigMap', () => c.configMap(ns, 'gw-api-reborn'));
    expect(await retain(c.core, ns, 'reborn')).not.toBeNull();
    await c.remove('ApiDefinition', ns, 'reborn');
    await waitFor('reborn gone', async () => (await c.get('ApiDefinition', ns, 'reborn')) === undefined);
    const started = Date.now();
    await api('reborn', `${ns}-reborn`, { global_rate_limit: { rate: 9, per: 60 } });
    const taken = await waitFor('the new definition written', async () => {
      const cm = await c.configMap(ns, 'gw-api-reborn');
      return cm?.metadata?.annotations?.['gw.dev/retain-until-reload'] === undefined ? cm : undefined;
    }, 10_000);
    // Well inside the 15 s the operator gives a delete under way.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(taken.metadata?.ownerReferences?.[0]?.uid).toBe((await c.get('ApiDefinition', ns, 'reborn'))?.metadata.uid);
    expect(taken.metadata?.annotations?.['gw.dev/retained-for-uid']).toBeUndefined();
    expect((await configOf('reborn'))?.apis[0]?.api_limit).toEqual({ rate: 9, per: 60 });
  });

  it("leaves a Secret of a Key's name that the Key does not own as it is and says so; a Key given a key_hash drops its generated Secret", async () => {
    const data = { key: Buffer.from('not-the-operators-key').toString('base64'), password: Buffer.from('hunter2').toString('base64') };
    await c.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'gw-key-squatted' }, data } });
    await c.create('Key', ns, { metadata: { name: 'squatted' }, spec: { alias: 'squatted', rate: 3, per: 10 } });
    const refused = await waitReady('Key', 'squatted', 'False');
    expect(ready(refused)).toMatchObject({ reason: 'SecretNameTaken', message: expect.stringContaining('Secret gw-key-squatted exists and is not this Key') });
    expect(await redis.exists(sessionKey(sha256('not-the-operators-key')))).toBe(0);
    const warnings = await c.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=squatted,reason=SecretNameTaken' });
    expect(warnings.items).toHaveLength(1);
    // Deleting the Key leaves the Secret, every entry of it.
    await c.remove('Key', ns, 'squatted');
    await waitFor('key gone', async () => (await c.get('Key', ns, 'squatted')) === undefined);
    expect((await c.core.readNamespacedSecret({ namespace: ns, name: 'gw-key-squatted' })).data).toEqual(data);

    // A Key given a key_hash after its key was generated: the generated key's Secret goes, and status no longer names it.
    await c.create('Key', ns, { metadata: { name: 'switched' }, spec: { alias: 'switched', rate: 3, per: 10 } });
    const generated = await waitReady('Key', 'switched');
    expect(generated.status?.secretName).toBe('gw-key-switched');
    const own = sha256(`switched-raw-${ns}`);
    await c.replaceSpec('Key', ns, 'switched', { alias: 'switched', rate: 3, per: 10, key_hash: own });
    const switched = await waitFor('status without the Secret', async () => {
      const k = await c.get('Key', ns, 'switched');
      return k?.status?.key_hash === own && k.status.secretName === undefined ? k : undefined;
    });
    expect(ready(switched)?.status).toBe('True');
    await waitFor('generated Secret gone', async () => !(await c.core.listNamespacedSecret({ namespace: ns })).items.some((x) => x.metadata?.name === 'gw-key-switched'));
    expect(await redis.exists(sessionKey(generated.status?.key_hash as string))).toBe(0);
  });

  it('a deleted Key that another finalizer holds says its session is removed, not stored', async () => {
    await c.create('Key', ns, { metadata: { name: 'held', finalizers: ['example.com/hold'] }, spec: { alias: 'held', rate: 3, per: 10 } });
    const hash = (await waitReady('Key', 'held')).status?.key_hash as string;
    await c.remove('Key', ns, 'held');
    const held = await waitFor('the session removed, said in status', async () => {
      const k = await c.get('Key', ns, 'held');
      return ready(k)?.reason === 'SessionRemoved' ? k : undefined;
    });
    expect(ready(held)).toMatchObject({ status: 'False', message: expect.stringContaining('waits on its other finalizers (example.com/hold)') });
    expect(held.metadata.finalizers).toEqual(['example.com/hold']);
    expect(await redis.exists(sessionKey(hash))).toBe(0);
    await kubectl(['patch', 'gwkey', 'held', '-n', ns, '--type', 'merge', '-p', '{"metadata":{"finalizers":null}}']);
    await waitFor('key gone', async () => (await c.get('Key', ns, 'held')) === undefined);
  });

  it('creates and removes Key Secrets and Redis sessions; admin-made keys keep their run-time fields', async () => {
    await c.create('Key', ns, { metadata: { name: 'made-by-kubectl' }, spec: { alias: 'k', rate: 3, per: 10 } });
    const key = await waitReady('Key', 'made-by-kubectl');
    const hash = key.status?.key_hash as string;
    expect(JSON.parse((await redis.get(sessionKey(hash))) ?? '{}')).toMatchObject({ alias: 'k', rate: 3, per: 10, allowance: 3, namespace: ns });
    await c.remove('Key', ns, 'made-by-kubectl');
    await waitFor('key gone', async () => (await c.get('Key', ns, 'made-by-kubectl')) === undefined);
    expect(await redis.exists(sessionKey(hash))).toBe(0);
    await waitFor('secret gone', async () => {
      const secrets = await c.core.listNamespacedSecret({ namespace: ns });
      return !secrets.items.some((s) => s.metadata?.name === 'gw-key-made-by-kubectl');
    });

    const adminHash = sha256(`admin-raw-${ns}`);
    await c.create('Key', ns, { metadata: { name: 'made-by-admin' }, spec: { key_hash: adminHash, rate: 5, per: 60, quota_max: 50 } });
    const adminKey = await waitReady('Key', 'made-by-admin');
    expect(adminKey.status?.key_hash).toBe(adminHash);
    expect(adminKey.status?.secretName).toBeUndefined();
    const stored = JSON.parse((await redis.get(sessionKey(adminHash)))!) as Record<string, unknown>;
    expect(stored).toMatchObject({ rate: 5, quota_max: 50, quota_remaining: 50 });
    await redis.set(sessionKey(adminHash), JSON.stringify({ ...stored, quota_remaining: 7 }));
    await c.replaceSpec('Key', ns, 'made-by-admin', { key_hash: adminHash, rate: 9, per: 60, quota_max: 50 });
    await waitFor('session updated from spec', async () => JSON.parse((await redis.get(sessionKey(adminHash)))!).rate === 9);
    expect(JSON.parse((await redis.get(sessionKey(adminHash)))!)).toMatchObject({ rate: 9, allowance: 9, quota_remaining: 7 });
    // A field the spec stops setting is gone from the session too, as with kubectl apply:
    // the key is active again and its policy no longer applies.
    await c.replaceSpec('Key', ns, 'made-by-admin', { key_hash: adminHash, rate: 9, per: 60, quota_max: 50, is_inactive: true, apply_policies: ['gold'] });
    await waitFor('session inactive', async () => JSON.parse((await redis.get(sessionKey(adminHash)))!).is_inactive === true);
    expect(ready(await waitReady('Key', 'made-by-admin', 'False'))).toMatchObject({ reason: 'Inactive', message: expect.stringContaining('is_inactive is true') });
    await c.replaceSpec('Key', ns, 'made-by-admin', { key_hash: adminHash, rate: 9, per: 60, quota_max: 50 });
    await waitFor('session active again', async () => JSON.parse((await redis.get(sessionKey(adminHash)))!).is_inactive === false);
    expect(JSON.parse((await redis.get(sessionKey(adminHash)))!)).toMatchObject({ apply_policies: [], is_inactive: false, quota_remaining: 7 });
    await redis.del(sessionKey(adminHash));
    await waitFor('lost session recreated', async () => (await redis.exists(sessionKey(adminHash))) === 1, 10_000);
  });

  it('lets the older of two Keys naming one key_hash hold its session; the other is DuplicateKeyHash until the older goes', async () => {
    const hash = sha256(`twin-raw-${ns}`);
    const sessionRate = async (): Promise<number | undefined> => (JSON.parse((await redis.get(sessionKey(hash))) ?? '{}') as { rate?: number }).rate;
    await c.create('Key', ns, { metadata: { name: 'twin-first' }, spec: { key_hash: hash, rate: 5, per: 60 } });
    await waitReady('Key', 'twin-first');
    await c.create('Key', ns, { metadata: { name: 'twin-second' }, spec: { key_hash: hash, rate: 7, per: 60 } });
    const second = await waitReady('Key', 'twin-second', 'False');
    expect(ready(second)?.reason).toBe('DuplicateKeyHash');
    expect(ready(second)?.message).toBe(`spec.key_hash is the hash of Key ${ns}/twin-first's key, which is older and holds its session: this Key is not in force`);
    expect(await sessionRate()).toBe(5);

    // Deleting the duplicate leaves the session to the Key holding it.
    await c.remove('Key', ns, 'twin-second');
    await waitFor('duplicate gone', async () => (await c.get('Key', ns, 'twin-second')) === undefined);
    expect(await sessionRate()).toBe(5);

    // Deleting the holder hands the session to the Key still naming the hash.
    await c.create('Key', ns, { metadata: { name: 'twin-third' }, spec: { key_hash: hash, rate: 9, per: 60 } });
    expect(ready(await waitReady('Key', 'twin-third', 'False'))?.reason).toBe('DuplicateKeyHash');
    await c.remove('Key', ns, 'twin-first');
    await waitReady('Key', 'twin-third');
    await waitFor('session taken over', async () => (await sessionRate()) === 9);
    await c.remove('Key', ns, 'twin-third');
    await waitFor('session removed with the last Key', async () => (await redis.exists(sessionKey(hash))) === 0);
  });

  it("keeps a generated key's session from a Key naming its hash (read from its status): that Key is DuplicateKeyHash, and deleting it locks nobody out", async () => {
    await c.create('Key', ns, { metadata: { name: 'generated-owner' }, spec: { rate: 5, per: 60 } });
    const owner = await waitReady('Key', 'generated-owner');
    const hash = owner.status?.key_hash;
    if (typeof hash !== 'string') throw new Error('the generated Key shows no key_hash');
    const session = async (): Promise<{ rate?: number; key_id?: string }> => JSON.parse((await redis.get(sessionKey(hash))) ?? '{}') as { rate?: number; key_id?: string };
    await c.create('Key', ns, { metadata: { name: 'hash-copier' }, spec: { key_hash: hash, rate: 1000, per: 1 } });
    const copier = await waitReady('Key', 'hash-copier', 'False');
    expect(ready(copier)?.reason).toBe('DuplicateKeyHash');
    expect(ready(copier)?.message).toBe(`spec.key_hash is the hash of Key ${ns}/generated-owner's key, whose own Secret holds that key and holds its session: this Key is not in force`);
    expect(await session()).toMatchObject({ rate: 5, key_id: 'generated-owner' });
    expect(ready(await c.get('Key', ns, 'generated-owner'))?.status).toBe('True');
    // Deleting the copy leaves the owner's session (it removed it before: the owner's key got 403).
    await c.remove('Key', ns, 'hash-copier');
    await waitFor('copy gone', async () => (await c.get('Key', ns, 'hash-copier')) === undefined);
    expect(await session()).toMatchObject({ rate: 5, key_id: 'generated-owner' });
    await c.remove('Key', ns, 'generated-owner');
    await waitFor('session removed with its Key', async () => (await redis.exists(sessionKey(hash))) === 0);
  });

  it('reports DuplicateProductId on a newer PortalProduct whose id the older one holds, until the older goes', async () => {
    const productId = `${ns}-gold`;
    await c.create('PortalProduct', ns, { metadata: { name: 'zz-older-product' }, spec: { id: productId } });
    await waitReady('PortalProduct', 'zz-older-product');
    // Created a second later (creation times are in seconds): newer, though first by name.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await c.create('PortalProduct', ns, { metadata: { name: 'aa-newer-product' }, spec: { id: productId } });
    const newer = await waitReady('PortalProduct', 'aa-newer-product', 'False');
    expect(ready(newer)?.reason).toBe('DuplicateProductId');
    expect(ready(newer)?.message).toBe(`product_id "${productId}" reaches PortalProduct ${ns}/zz-older-product, which tags posted to it are added to`);
    expect(ready(await c.get('PortalProduct', ns, 'zz-older-product'))?.status).toBe('True');
    const events = await kubectl(['get', 'events', '-n', ns, '--field-selector', 'involvedObject.name=aa-newer-product', '-o', 'json']);
    expect((JSON.parse(events.stdout) as { items: Array<{ type: string; reason: string }> }).items.map((e) => `${e.type}/${e.reason}`)).toContain('Warning/DuplicateProductId');
    await c.remove('PortalProduct', ns, 'zz-older-product');
    expect(ready(await waitReady('PortalProduct', 'aa-newer-product'))?.reason).toBe('Valid');
  });

  it("compiles a Policy without access_rights into every API's ConfigMap, since its limits cover every API its keys may call", async () => {
    await api('cover-a', `${ns}-cover-a`);
    const policyId = `${ns}/covers-all`;
    await c.create('Policy', ns, { metadata: { name: 'covers-all' }, spec: { rate: 3, per: 60 } });
    await waitFor('cover-a config with the policy', async () => (await configOf('cover-a'))?.policies[policyId]?.rate?.rate === 3);
    expect(ready(await waitReady('Policy', 'covers-all'))?.message).toBe('grants no API: its limits cover every API its keys may call; used by no keys');
    await c.replaceSpec('Policy', ns, 'covers-all', { rate: 4, per: 60 });
    await waitFor('cover-a config with the edit', async () => (await configOf('cover-a'))?.policies[policyId]?.rate?.rate === 4);
    // Given a grant, it leaves the APIs it no longer covers.
    await c.replaceSpec('Policy', ns, 'covers-all', { rate: 4, per: 60, access_rights: { [`${ns}-elsewhere`]: {} } });
    await waitFor('cover-a config without the policy', async () => {
      const config = await configOf('cover-a');
      return config !== undefined && !(policyId in config.policies);
    });
    await c.remove('Policy', ns, 'covers-all');
  });

  it('serves health and metrics with reconcile counts', async () => {
    const base = `http://127.0.0.1:${operator.healthPort()}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', reasons: [], problems: [] });
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toMatch(/gw_operator_reconciles_total\{kind="ApiDefinition",result="success"\} [1-9]/);
    expect(metrics).toContain('gw_operator_queue_depth{kind="Key"}');
    expect((await fetch(`${base}/nope`)).status).toBe(404);
  });
});
