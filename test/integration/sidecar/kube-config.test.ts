import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_ID_LABEL, configMapName, RETAIN_ANNOTATION } from '../../../common/compiled-config-map.ts';
import type { CompiledApi, CompiledConfig } from '../../../crds/compiled.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace, kubeConfig } from '../../harness/index.ts';
import { policy } from '../../support/compiled-fixtures.ts';
import { call, compiledApi, compiledConfig, deployApi, eventually, quietLogger, servesApi, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';
import { KubeConfigSource } from '../../../sidecar/config/kube-source.ts';
import { createSidecarMetrics } from '../../../sidecar/metrics.ts';
import { defaultGatewaySettings } from '../../../crds/settings.ts';

describe('Kubernetes config source', () => {
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  let namespace: string;
  const core = kubeConfig().makeApiClient(CoreV1Api);

  beforeAll(async () => {
    namespace = await createNamespace('sc-kube-config');
    upstream = await startEchoUpstream();
    sidecar = await startTestSidecar(sidecarOptions(namespace));
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
  });

  const pathSeen = async (apiId: string): Promise<string> => {
    const res = await call(`${sidecar.proxyUrl}/${apiId}/x`);
    return res.status === 200 ? (res.json() as { path: string }).path : `status ${res.status}`;
  };

  it('is ready once the (empty) namespace is listed', async () => {
    // Failing open, a gateway is ready before its Redis connection is (listed under problems until then).
    await eventually(() => sidecar.readiness().ready && sidecar.readiness().problems.length === 0, 10_000, 'readiness');
    const res = await call(`${sidecar.healthUrl}/readyz`);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ status: 'ready', reasons: [], problems: [] });
    expect((await call(`${sidecar.healthUrl}/healthz`)).json()).toEqual({ status: 'ok' });
    expect((await call(`${sidecar.healthUrl}/readyz`, { method: 'POST' })).status).toBe(405);
    expect((await call(`${sidecar.healthUrl}/nothing`)).status).toBe(404);
  });

  it('loads a created ConfigMap, applies an update, keeps the last good config on an invalid one', async () => {
    const api = compiledApi(uniqueId('api'), `${upstream.url}/v1`);
    await deployApi(sidecar, namespace, api);
    expect(await pathSeen(api.api_id)).toBe('/v1/x');

    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([{ ...api, target_url: `${upstream.url}/v2` }])));
    await eventually(async () => (await pathSeen(api.api_id)) === '/v2/x', 10_000, 'updated target');

    const errorsBefore = (await sidecar.metrics.configReloadErrors.get()).values.find((v) => v.labels.api_id === api.api_id)?.value ?? 0;
    await writeConfigMap(namespace, api.api_id, JSON.stringify({ version: 1, apis: 'not a list' }));
    await eventually(
      async () => ((await sidecar.metrics.configReloadErrors.get()).values.find((v) => v.labels.api_id === api.api_id)?.value ?? 0) > errorsBefore,
      10_000,
      'reload error counted',
    );
    expect(await pathSeen(api.api_id)).toBe('/v2/x');
    const ready = await call(`${sidecar.healthUrl}/readyz`);
    expect(ready.status).toBe(200);
    expect((ready.json() as { problems: { subject: string }[] }).problems).toContainEqual(expect.objectContaining({ subject: `api ${api.api_id}` }));
    await writeConfigMap(namespace, api.api_id, '{not json');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await pathSeen(api.api_id)).toBe('/v2/x');
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([{ ...api, target_url: `${upstream.url}/v3` }])));
    await eventually(async () => (await pathSeen(api.api_id)) === '/v3/x', 10_000, 'good config after bad ones');
    expect(sidecar.runtime.problems().some((p) => p.subject === `api ${api.api_id}`)).toBe(false);
  });

  it('refuses a ConfigMap whose path pattern could take exponential time (compiled before the operator refused it), keeping the last good config', async () => {
    const api = compiledApi(uniqueId('api'), `${upstream.url}/v1`);
    await deployApi(sidecar, namespace, api);
    expect(await pathSeen(api.api_id)).toBe('/v1/x');
    const backreference = { path: '/(a+)\\1', pattern: '^(?:/(a+)\\1)$', method: 'GET', rate: 1, per: 1 };
    // Written as an older operator wrote it: the fixture's own parse would refuse the pattern.
    const older = compiledConfig([{ ...api, target_url: `${upstream.url}/v2` }]);
    await writeConfigMap(namespace, api.api_id, JSON.stringify({ ...older, apis: older.apis.map((a) => ({ ...a, endpoint_limits: [backreference] })) }));
    await eventually(() => sidecar.runtime.problems().some((p) => p.subject === `api ${api.api_id}`), 10_000, 'the ConfigMap refused');
    expect(sidecar.runtime.problems().find((p) => p.subject === `api ${api.api_id}`)?.reason).toContain('could take exponential time to match');
    expect(await pathSeen(api.api_id)).toBe('/v1/x');
  });

  it('of two APIs on one listen path serves the one whose api_id comes first in code units, whichever came first, and follows an api_id change', async () => {
    const run = uniqueId('order');
    // In code units 'B' (66) comes before 'a' (97), where a locale's collation puts 'a' first.
    const [upper, lower, later] = [`${run}-B`, `${run}-a`, `${run}-c`];
    const shared = { listen_path: `/${run}/` };
    const seen = async (): Promise<string> => {
      const res = await call(`${sidecar.proxyUrl}/${run}/x`);
      return res.status === 200 ? (res.json() as { path: string }).path : `status ${res.status}`;
    };
    /** A ConfigMap's name is lower case whatever its API's api_id, as the operator names it after the ApiDefinition. */
    const publish = async (configMap: string, apiId: string, target: string): Promise<void> => {
      await writeConfigMap(namespace, configMap, JSON.stringify(compiledConfig([compiledApi(apiId, `${upstream.url}/${target}`, shared)])));
      await eventually(servesApi(sidecar, apiId), 10_000, `api ${apiId} loaded`);
    };
    /** What /readyz says of the API no request reaches. */
    const shadowed = async (): Promise<string[]> => {
      const { problems } = (await call(`${sidecar.healthUrl}/readyz`)).json() as { problems: { subject: string; reason: string }[] };
      return problems.filter((p) => p.reason.endsWith('this API is never reached')).map((p) => `${p.subject}: ${p.reason}`);
    };
    await publish(`${run}-one`, lower, 'lower');
    await publish(`${run}-two`, upper, 'upper');
    expect(await seen()).toBe('/upper/x');
    expect(await shadowed()).toEqual([`ApiDefinition default/${lower}: listen path /${run}/ is served by ApiDefinition default/${upper} (its api_id ${upper} comes first); this API is never reached`]);
    // The upper-case API's ConfigMap now carries an api_id that comes after the other's.
    await publish(`${run}-two`, later, 'upper');
    expect(await seen()).toBe('/lower/x');
    expect(await shadowed()).toEqual([`ApiDefinition default/${later}: listen path /${run}/ is served by ApiDefinition default/${lower} (its api_id ${lower} comes first); this API is never reached`]);
    // Gone (a reload unloads a deleted ConfigMap's API without the grace): nothing is shadowed any more.
    await core.deleteNamespacedConfigMap({ namespace, name: configMapName(`${run}-two`) });
    await eventually(async () => (await sidecar.runtime.reload(), (await shadowed()).length === 0), 10_000, 'no API shadowed');
  });

  it('on reload() parses again only the ConfigMaps written since: an unchanged API keeps its compiled object', async () => {
    const kept = compiledApi(uniqueId('api'), upstream.url);
    const edited = compiledApi(uniqueId('api'), upstream.url);
    await deployApi(sidecar, namespace, kept);
    await deployApi(sidecar, namespace, edited);
    const loaded = (apiId: string): CompiledApi | undefined => sidecar.runtime.apis().find((a) => a.api_id === apiId);
    const before = loaded(kept.api_id);
    await writeConfigMap(namespace, edited.api_id, JSON.stringify(compiledConfig([{ ...edited, target_url: `${upstream.url}/v2` }])));
    await sidecar.runtime.reload();
    expect(loaded(kept.api_id)).toBe(before);
    expect(loaded(edited.api_id)?.target_url).toBe(`${upstream.url}/v2`);
    expect(await pathSeen(edited.api_id)).toBe('/v2/x');
  });

  it('keeps serving an API whose ConfigMap was deleted, within the grace, until reload()', async () => {
    const api = compiledApi(uniqueId('api'), upstream.url);
    await deployApi(sidecar, namespace, api);
    await core.deleteNamespacedConfigMap({ name: `gw-api-${api.api_id}`, namespace });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await pathSeen(api.api_id)).toBe('/x');
    await sidecar.runtime.reload();
    expect(sidecar.runtime.apis().some((a) => a.api_id === api.api_id)).toBe(false);
    expect(await pathSeen(api.api_id)).toBe('status 404');
  });

  it('unloads an API whose ConfigMap was deleted (kubectl delete of its ApiDefinition) after the grace, unless the ConfigMap comes back', async () => {
    const published: CompiledConfig[] = [];
    const source = new KubeConfigSource({
      kubeConfig: kubeConfig(),
      namespace,
      apis: '*',
      defaultSettings: defaultGatewaySettings,
      logger: quietLogger,
      metrics: createSidecarMetrics(),
      deletedGraceMs: 1_500,
    });
    const servedIds = (): string[] => published.at(-1)?.apis.map((a) => a.api_id) ?? [];
    const gone = compiledApi(uniqueId('gone'), upstream.url);
    const restored = compiledApi(uniqueId('restored'), upstream.url);
    await writeConfigMap(namespace, gone.api_id, JSON.stringify(compiledConfig([gone])));
    await writeConfigMap(namespace, restored.api_id, JSON.stringify(compiledConfig([restored])));
    await source.start((config) => published.push(config));
    try {
      await eventually(() => servedIds().includes(gone.api_id) && servedIds().includes(restored.api_id), 10_000, 'both served');
      await core.deleteNamespacedConfigMap({ name: configMapName(gone.api_id), namespace });
      await core.deleteNamespacedConfigMap({ name: configMapName(restored.api_id), namespace });
      // The operator puts back a ConfigMap deleted by hand: within the grace, its API never left.
      await writeConfigMap(namespace, restored.api_id, JSON.stringify(compiledConfig([restored])));
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(servedIds()).toEqual(expect.arrayContaining([gone.api_id, restored.api_id]));
      await eventually(() => !servedIds().includes(gone.api_id), 10_000, 'the deleted API unloaded');
      expect(servedIds()).toContain(restored.api_id);
    } finally {
      await source.stop();
    }
  });

  it("keeps a retained API's policy grants, and takes a policy's later edits from the ConfigMaps the operator keeps up to date", async () => {
    // 'z-…' sorts after 'a-…': the retained part comes last, where it used to override the policy.
    const [kept, retained] = [compiledApi(uniqueId('a-live'), upstream.url), compiledApi(uniqueId('z-gone'), upstream.url)];
    const right = (apiId: string) => ({ api_id: apiId, api_name: apiId, limit: null, endpoints: [] });
    const grants = (rate: number, ...apiIds: string[]) =>
      policy(uniqueId('p'), { rate: { rate, per: 60 }, access_rights: Object.fromEntries(apiIds.map((id) => [id, right(id)])) });
    const both = grants(10, kept.api_id, retained.api_id);
    const id = both.id;
    const loadedPolicy = () => sidecar.runtime.state().policies[id];
    await writeConfigMap(namespace, kept.api_id, JSON.stringify(compiledConfig([kept], {}, [both])));
    await writeConfigMap(namespace, retained.api_id, JSON.stringify(compiledConfig([retained], {}, [both])));
    await eventually(() => servesApi(sidecar, kept.api_id)() && servesApi(sidecar, retained.api_id)(), 10_000, 'both served');

    // The admin delete marks the ConfigMap retained; the operator then compiles the kept API
    // without the deleted one (the policy's grant of it is gone), and the policy is edited.
    const name = configMapName(retained.api_id);
    const cm = await core.readNamespacedConfigMap({ name, namespace });
    cm.metadata = { ...cm.metadata, annotations: { ...cm.metadata?.annotations, [RETAIN_ANNOTATION]: 'true' } };
    await core.replaceNamespacedConfigMap({ name, namespace, body: cm });
    const edited = { ...grants(99, kept.api_id), id, source: both.source };
    await writeConfigMap(namespace, kept.api_id, JSON.stringify(compiledConfig([kept], {}, [edited])));
    await eventually(() => loadedPolicy()?.rate?.rate === 99, 10_000, 'the edit of the current ConfigMap applied');
    expect(Object.keys(loadedPolicy()!.access_rights).sort()).toEqual([kept.api_id, retained.api_id].sort());

    // A reload that lists the ConfigMaps again reads the same.
    await sidecar.runtime.reload();
    expect(servesApi(sidecar, retained.api_id)()).toBe(true);
    expect(loadedPolicy()?.rate?.rate).toBe(99);
    expect(Object.keys(loadedPolicy()!.access_rights).sort()).toEqual([kept.api_id, retained.api_id].sort());
    // The reload on some sidecar deletes the retained ConfigMap.
    await core.deleteNamespacedConfigMap({ name, namespace });
    await eventually(() => !servesApi(sidecar, retained.api_id)(), 10_000, 'retained API unloaded');
    expect(Object.keys(loadedPolicy()!.access_rights)).toEqual([kept.api_id]);
  });

  it('unloads at once when a retained ConfigMap is deleted (a reload happened on some sidecar)', async () => {
    const api = compiledApi(uniqueId('api'), upstream.url);
    await deployApi(sidecar, namespace, api);
    const name = `gw-api-${api.api_id}`;
    const cm = await core.readNamespacedConfigMap({ name, namespace });
    cm.metadata = { ...cm.metadata, annotations: { ...cm.metadata?.annotations, [RETAIN_ANNOTATION]: 'true' } };
    await core.replaceNamespacedConfigMap({ name, namespace, body: cm });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await pathSeen(api.api_id)).toBe('/x');
    await core.deleteNamespacedConfigMap({ name, namespace });
    await eventually(() => !servesApi(sidecar, api.api_id)(), 10_000, 'api unloaded');
    expect(await pathSeen(api.api_id)).toBe('status 404');
  });

  it('serves only the api_ids of GW_APIS', async () => {
    const wanted = compiledApi(uniqueId('api'), upstream.url);
    const other = compiledApi(uniqueId('api'), upstream.url);
    const filtered = await startTestSidecar({ ...sidecarOptions(namespace), apis: new Set([wanted.api_id]) });
    try {
      // Named and held by no ConfigMap yet: /readyz says so, and the gateway stays ready.
      const readyz = async (): Promise<{ status: string; problems: { subject: string; reason: string }[] }> => (await call(`${filtered.healthUrl}/readyz`)).json() as never;
      // Its Redis connection may still be opening on a loaded machine: that is listed too, until it is open.
      const reported = async (): Promise<boolean> => {
        const subjects = (await readyz()).problems.map((problem) => problem.subject);
        return subjects.includes(`api ${wanted.api_id}`) && !subjects.includes('Redis');
      };
      await eventually(reported, 10_000, 'the missing API reported');
      expect(await readyz()).toMatchObject({
        status: 'ready',
        problems: [{ subject: `api ${wanted.api_id}`, reason: `GW_APIS names it, and no compiled ConfigMap in namespace ${namespace} holds it: is there an ApiDefinition with this api_id (the operator compiles it within seconds)?` }],
      });
      await writeConfigMap(namespace, wanted.api_id, JSON.stringify(compiledConfig([wanted])));
      await writeConfigMap(namespace, other.api_id, JSON.stringify(compiledConfig([other])));
      await eventually(servesApi(filtered, wanted.api_id));
      await eventually(servesApi(sidecar, other.api_id));
      expect(servesApi(filtered, other.api_id)()).toBe(false);
      expect((await readyz()).problems).toEqual([]);
    } finally {
      await filtered.close();
    }
  });

  it('serves a GW_APIS api_id too long for a label value (its ConfigMap carries the hashed label)', async () => {
    const long = compiledApi(`${uniqueId('api')}-${'x'.repeat(70)}`, upstream.url);
    const filtered = await startTestSidecar({ ...sidecarOptions(namespace), apis: new Set([long.api_id]) });
    try {
      await writeConfigMap(namespace, long.api_id, JSON.stringify(compiledConfig([long])));
      const cm = await core.readNamespacedConfigMap({ name: configMapName(long.api_id), namespace });
      expect(cm.metadata?.labels?.[API_ID_LABEL]).toMatch(/^h-[0-9a-f]{40}$/);
      await eventually(servesApi(filtered, long.api_id));
    } finally {
      await filtered.close();
    }
  });
});
