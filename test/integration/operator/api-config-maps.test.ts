import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KindName } from '../../../crds/kinds.ts';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, ready, removeGwResources, startOperator, waitFor } from './support.ts';

const RESYNC_SECONDS = 3;

/** Every ApiDefinition reconcile the operator ran, whatever its result. */
async function apiReconciles(operator: Operator): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${operator.healthPort()}/metrics`)).text();
  return [...text.matchAll(/^gw_operator_reconciles_total\{kind="ApiDefinition",result="\w+"\} (\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
}

describe('operator: the compiled ConfigMap of an ApiDefinition', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let ns: string;
  let operator: Operator;

  const apiSpec = (name: string, extra: Record<string, unknown> = {}) => ({
    api_id: `${ns}-${name}`,
    use_keyless: true,
    proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' },
    ...extra,
  });
  const api = (name: string) => c.create('ApiDefinition', ns, { metadata: { name }, spec: apiSpec(name) });
  const configOf = async (name: string): Promise<string | undefined> => (await c.configMap(ns, `gw-api-${name}`))?.data?.['config.json'];
  const waitReady = (kind: KindName, name: string, want: 'True' | 'False') =>
    waitFor(`${kind} ${name} Ready=${want}`, async () => {
      const obj = await c.get(kind, ns, name);
      return ready(obj)?.status === want && obj?.status?.observedGeneration === obj?.metadata.generation ? ready(obj) : undefined;
    });
  /** Deletes the ConfigMap by hand and waits for it to be back: the operator's watch event, well before a resync. */
  async function deletedComesBack(name: string): Promise<string> {
    await c.core.deleteNamespacedConfigMap({ namespace: ns, name: `gw-api-${name}` });
    const started = Date.now();
    const back = await waitFor(`gw-api-${name} back`, () => configOf(name), 4 * RESYNC_SECONDS * 1000);
    expect(Date.now() - started).toBeLessThan(RESYNC_SECONDS * 1000);
    return back;
  }

  beforeAll(async () => {
    ns = await createNamespace('op-api-cm');
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns, resyncSeconds: RESYNC_SECONDS });
  });

  afterAll(async () => {
    await removeGwResources(kc, ns);
    await operator?.stop();
  });

  it('leaves a ConfigMap of its name made by someone else as it is, says so, looks again at the resync pace, and writes its own once that one is gone', async () => {
    const foreign = { metadata: { name: 'gw-api-foreign' }, data: { 'config.json': '{"hand":1}' } };
    await c.core.createNamespacedConfigMap({ namespace: ns, body: foreign });
    await api('foreign');
    const refused = await waitFor('ApiDefinition foreign Ready=False', async () => {
      const cond = ready(await c.get('ApiDefinition', ns, 'foreign'));
      return cond?.status === 'False' ? cond : undefined;
    });
    expect(refused).toMatchObject({ reason: 'ConfigMapNameTaken', message: expect.stringContaining('ConfigMap gw-api-foreign exists and is not this ApiDefinition') });
    const warnings = await waitFor('the Warning event', async () => {
      const events = await c.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=foreign,reason=ConfigMapNameTaken' });
      return events.items.length > 0 ? events.items : undefined;
    });
    expect(warnings[0]?.type).toBe('Warning');

    // Not a cache behind the store, so no retry every second: the resync's pace.
    const before = await apiReconciles(operator);
    await new Promise((resolve) => setTimeout(resolve, 2 * RESYNC_SECONDS * 1000));
    expect(await apiReconciles(operator) - before).toBeLessThanOrEqual(3);
    const untouched = await c.configMap(ns, 'gw-api-foreign');
    expect(untouched?.data).toEqual(foreign.data);
    expect(untouched?.metadata?.labels).toBeUndefined();
    expect(untouched?.metadata?.ownerReferences).toBeUndefined();

    await c.core.deleteNamespacedConfigMap({ namespace: ns, name: 'gw-api-foreign' });
    const own = await waitFor('the operator writes its own', async () => {
      const cm = await c.configMap(ns, 'gw-api-foreign');
      return cm?.metadata?.labels?.['app.kubernetes.io/managed-by'] === 'gw-operator' ? cm : undefined;
    }, 4 * RESYNC_SECONDS * 1000);
    expect(own.metadata?.ownerReferences?.[0]?.uid).toBe((await c.get('ApiDefinition', ns, 'foreign'))?.metadata.uid);
    expect(JSON.parse(own.data!['config.json']!).apis[0].api_id).toBe(`${ns}-foreign`);
    await waitFor('ApiDefinition foreign Ready=True', async () => ready(await c.get('ApiDefinition', ns, 'foreign'))?.status === 'True');
  });

  it('writes back, as it was, the ConfigMap of an ApiDefinition the compile step refuses when it is deleted by hand', async () => {
    await api('refused');
    const good = await waitFor('refused compiled', () => configOf('refused'));
    await c.replaceSpec('ApiDefinition', ns, 'refused', apiSpec('refused', { use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x[', method: 'GET', rate: 1, per: 1 }] } }));
    expect(await waitReady('ApiDefinition', 'refused', 'False')).toMatchObject({ reason: 'InvalidRegex' });
    expect(await deletedComesBack('refused')).toBe(good);
    const cm = await c.configMap(ns, 'gw-api-refused');
    expect(cm?.metadata?.ownerReferences?.[0]?.uid).toBe((await c.get('ApiDefinition', ns, 'refused'))?.metadata.uid);
    expect(cm?.metadata?.labels?.['app.kubernetes.io/managed-by']).toBe('gw-operator');

    // A hand edit meanwhile is undone as well, and once fixed the API compiles as usual.
    await c.core.patchNamespacedConfigMap({ namespace: ns, name: 'gw-api-refused', body: [{ op: 'replace', path: '/data/config.json', value: '{"hacked":true}' }] });
    await waitFor('the edit undone', async () => (await configOf('refused')) === good);
    await c.replaceSpec('ApiDefinition', ns, 'refused', apiSpec('refused', { global_rate_limit: { rate: 7, per: 60 } }));
    await waitFor('the fixed API compiled', async () => JSON.parse((await configOf('refused')) ?? '{}').apis?.[0]?.api_limit?.rate === 7);
  });

  it('keeps a refused ApiDefinition served as in force, but with its Policies as they are now: a deleted or revoked grant goes', async () => {
    const apiId = `${ns}-frozen`;
    await api('frozen');
    const grant = (rate: number) => ({ rate, per: 60, access_rights: { [apiId]: {} } });
    await c.create('Policy', ns, { metadata: { name: 'revoked' }, spec: grant(5) });
    await c.create('Policy', ns, { metadata: { name: 'deleted' }, spec: grant(6) });
    await c.create('Policy', ns, { metadata: { name: 'edited' }, spec: grant(7) });
    const policiesOf = async (): Promise<string[]> => Object.keys(JSON.parse((await configOf('frozen')) ?? '{"policies":{}}').policies).sort();
    await waitFor('the three policies compiled', async () => (await policiesOf()).length === 3);
    const served = JSON.parse((await configOf('frozen'))!).apis;
    await c.replaceSpec('ApiDefinition', ns, 'frozen', apiSpec('frozen', { global_rate_limit: { rate: 1, per: 1 }, use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x[', method: 'GET', rate: 1, per: 1 }] } }));
    expect(await waitReady('ApiDefinition', 'frozen', 'False')).toMatchObject({ reason: 'InvalidRegex' });

    await c.remove('Policy', ns, 'deleted');
    await c.replaceSpec('Policy', ns, 'revoked', { rate: 5, per: 60, access_rights: { other: {} } });
    await c.replaceSpec('Policy', ns, 'edited', grant(70));
    // The three changes reach the ConfigMap in one reconcile or several: waited for together.
    const config = await waitFor('only the edited policy left in force, as edited', async () => {
      const now = JSON.parse((await configOf('frozen'))!) as { apis: unknown; policies: Record<string, { rate: { rate: number; per: number } }> };
      return Object.keys(now.policies).join() === `${ns}/edited` && now.policies[`${ns}/edited`]?.rate.rate === 70 ? now : undefined;
    });
    expect(config.policies[`${ns}/edited`]!.rate).toEqual({ rate: 70, per: 60 });
    // The API itself is still the one in force: its refused edit (a limit of 1/1) is not served.
    expect(config.apis).toEqual(served);
    const status = (await c.get('ApiDefinition', ns, 'frozen'))?.status;
    expect([ready(await c.get('ApiDefinition', ns, 'frozen'))?.reason, status?.policies]).toEqual(['InvalidRegex', [`${ns}/edited`]]);
  });

  it('applies a deleted or tightened grant to an API whose new Policies made its config too large for one ConfigMap', async () => {
    const apiId = `${ns}-crowded`;
    await api('crowded');
    const grant = (rate: number, extra: Record<string, unknown> = {}) => ({ rate, per: 60, access_rights: { [apiId]: {} }, ...extra });
    for (const [name, rate] of [['kept', 5], ['dropped', 6], ['tightened', 7]] as const) await c.create('Policy', ns, { metadata: { name }, spec: grant(rate) });
    const configOfCrowded = async (): Promise<{ policies: Record<string, { rate: { rate: number } }> }> => JSON.parse((await configOf('crowded')) ?? '{"policies":{}}');
    await waitFor('the three policies compiled', async () => Object.keys((await configOfCrowded()).policies).length === 3);
    // Ten Policies of 100 KB each: the API's config no longer fits one ConfigMap.
    const blob = 'x'.repeat(100_000);
    for (let i = 0; i < 10; i += 1) await c.create('Policy', ns, { metadata: { name: `bulk-${i}` }, spec: grant(1, { meta_data: { blob } }) });
    expect(await waitReady('ApiDefinition', 'crowded', 'False')).toMatchObject({ reason: 'ConfigTooLarge' });
    const refusedAt = Date.now();

    await c.remove('Policy', ns, 'dropped');
    await c.replaceSpec('Policy', ns, 'tightened', grant(2));
    const revoked = await waitFor('the deleted grant gone and the tightened one applied', async () => {
      const config = await configOfCrowded();
      return !(`${ns}/dropped` in config.policies) && config.policies[`${ns}/tightened`]?.rate.rate === 2 ? config : undefined;
    });
    expect(revoked.policies[`${ns}/kept`]?.rate.rate).toBe(5);
    // No Policy is added past the bound: what is served still fits one ConfigMap.
    expect(Buffer.byteLength((await configOf('crowded'))!)).toBeLessThanOrEqual(900 * 1024);
    const status = (await c.get('ApiDefinition', ns, 'crowded'))?.status;
    expect(ready(await c.get('ApiDefinition', ns, 'crowded'))?.reason).toBe('ConfigTooLarge');
    expect(status?.policies).toEqual(Object.keys(revoked.policies));
    // A Policy past the bound says it is not in force (the last one never fits; the first ones
    // may have been compiled in, one reconcile at a time); one served says it is.
    expect(await waitReady('Policy', 'bulk-9', 'False')).toMatchObject({
      reason: 'NotInForce',
      message: `not in force on api_id "${apiId}": ApiDefinition ${ns}/crowded is ConfigTooLarge and serves its last good config, without this Policy`,
    });
    // Told by the API's status (the operator's own write), not found at the next resync.
    expect(Date.now() - refusedAt).toBeLessThan(RESYNC_SECONDS * 1000);
    expect(ready(await c.get('Policy', ns, 'kept'))).toMatchObject({ status: 'True', reason: 'Valid' });
    for (let i = 0; i < 9; i += 1) await c.remove('Policy', ns, `bulk-${i}`);
    await waitReady('ApiDefinition', 'crowded', 'True');
    expect(await waitReady('Policy', 'bulk-9', 'True')).toMatchObject({ reason: 'Valid' });
    await c.remove('Policy', ns, 'bulk-9');
  }, 60_000);

  it('says a Key applying a Policy refused before it ever compiled is PolicyNotInForce, and Ready once the Policy is fixed', async () => {
    const apiId = `${ns}-unserved`;
    await api('unserved');
    const spec = (path: string) => ({ rate: 10, per: 60, access_rights: { [apiId]: { endpoints: [{ path, methods: [{ name: 'GET', limit: { rate: 2, per: 60 } }] }] } } });
    await c.create('Policy', ns, { metadata: { name: 'never-compiled' }, spec: spec('/a(') });
    expect(await waitReady('Policy', 'never-compiled', 'False')).toMatchObject({ reason: 'InvalidRegex' });
    await c.create('Key', ns, { metadata: { name: 'unserved' }, spec: { rate: 5, per: 60, apply_policies: ['never-compiled'] } });
    expect(await waitReady('Key', 'unserved', 'False')).toMatchObject({
      reason: 'PolicyNotInForce',
      message: 'apply_policies names never-compiled (InvalidRegex), in force on no API: what it grants and limits does not apply to this key',
    });
    const fixedAt = Date.now();
    await c.replaceSpec('Policy', ns, 'never-compiled', spec('/a'));
    expect(await waitReady('Key', 'unserved', 'True')).toMatchObject({ reason: 'SessionStored' });
    // Told by the Policy's and the API's statuses (the operator's own writes), not found at the next resync.
    expect(Date.now() - fixedAt).toBeLessThan(RESYNC_SECONDS * 1000);
    expect((await c.get('ApiDefinition', ns, 'unserved'))?.status?.policies).toEqual([`${ns}/never-compiled`]);
    await c.remove('Key', ns, 'unserved');
  });

  it("keeps a refused Policy's last good version in an API's ConfigMap deleted by hand", async () => {
    const apiId = `${ns}-granted`;
    await api('granted');
    const spec = (path: string, rate: number) => ({ rate, per: 60, access_rights: { [apiId]: { endpoints: [{ path, methods: [{ name: 'GET', limit: { rate: 2, per: 60 } }] }] } } });
    await c.create('Policy', ns, { metadata: { name: 'grant' }, spec: spec('/a', 10) });
    const policyId = `${ns}/grant`;
    const good = await waitFor('the policy compiled', async () => {
      const json = await configOf('granted');
      return json !== undefined && JSON.parse(json).policies[policyId] ? json : undefined;
    });
    const reconciled = await apiReconciles(operator);
    await c.replaceSpec('Policy', ns, 'grant', spec('/a(', 50));
    expect(await waitReady('Policy', 'grant', 'False')).toMatchObject({ reason: 'InvalidRegex' });
    // The operator sees the refusal at the API's reconcile the Policy's edit sets off.
    await waitFor('the API reconciled', async () => (await apiReconciles(operator)) > reconciled);
    const back = JSON.parse(await deletedComesBack('granted'));
    expect(back.policies[policyId]).toEqual(JSON.parse(good).policies[policyId]);
    expect(ready(await c.get('ApiDefinition', ns, 'granted'))?.status).toBe('True');
  });
});
