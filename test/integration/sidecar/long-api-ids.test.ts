import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_ID_LABEL, CONFIG_KEY, configMapName, MANAGED_BY, MANAGED_BY_LABEL, RETAIN_ANNOTATION } from '../../../common/compiled-config-map.ts';
import { labelValueFor } from '../../../common/label-value.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { releaseRetained } from '../../../sidecar/resources/retained-config-maps.ts';
import { createNamespace, kubeConfig } from '../../harness/index.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { compiledApi, compiledConfig, eventually, servesApi, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';

/**
 * An api_id longer than a label value allows: its ConfigMap carries a hash as the label,
 * but logs, metrics and readiness problems name the api_id itself.
 */
describe('an api_id longer than 63 characters', () => {
  let namespace: string;
  let sidecar: RunningSidecar;
  const lines: string[] = [];
  const core = kubeConfig().makeApiClient(CoreV1Api);
  const logged = (msg: string): Record<string, unknown>[] =>
    lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => entry.msg === msg);

  beforeAll(async () => {
    namespace = await createNamespace('sc-long-ids');
    // GW_APIS=* (the admin gateway): only the label selects the ConfigMaps, and it is a hash here.
    sidecar = await startTestSidecar(sidecarOptions(namespace), { logger: collectingLogger(lines) });
  });

  afterAll(async () => {
    await sidecar?.close();
  });

  it('is logged, counted and reported as itself, never as its hashed label', async () => {
    const api = compiledApi(`${uniqueId('api')}-${'x'.repeat(70)}`, 'http://127.0.0.1:1');
    const label = labelValueFor(api.api_id);
    expect(label).toMatch(/^h-[0-9a-f]{40}$/);
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api])));
    await eventually(servesApi(sidecar, api.api_id), 10_000, 'the long api_id served');
    expect(logged('config loaded').some((entry) => (entry.apis as string[]).includes(api.api_id))).toBe(true);

    // Valid JSON naming the API, invalid as a config.
    await writeConfigMap(namespace, api.api_id, JSON.stringify({ version: 1, apis: [{ api_id: api.api_id }], policies: 'not a map' }));
    await eventually(() => logged('invalid compiled config refused; keeping the last good one').length === 1, 10_000, 'the refusal logged');
    // Not even JSON: the last good config names the API.
    await writeConfigMap(namespace, api.api_id, '{not json');
    await eventually(() => logged('invalid compiled config refused; keeping the last good one').length === 2, 10_000, 'the second refusal logged');
    expect(logged('invalid compiled config refused; keeping the last good one').map((entry) => entry.apiId)).toEqual([api.api_id, api.api_id]);
    const errors = (await sidecar.metrics.configReloadErrors.get()).values.filter((v) => v.labels.api_id === api.api_id);
    expect(errors.map((v) => v.value)).toEqual([2]);
    expect(sidecar.runtime.problems().map((p) => p.subject)).toEqual([`api ${api.api_id}`]);

    await core.deleteNamespacedConfigMap({ name: configMapName(api.api_id), namespace });
    await eventually(() => logged('ConfigMap deleted; API unloaded after the grace unless it comes back').length === 1, 10_000, 'the deletion logged');
    expect(logged('ConfigMap deleted; API unloaded after the grace unless it comes back')[0]?.apiId).toBe(api.api_id);
    expect(lines.join('\n')).not.toContain(label);
  });

  it('is what a reload reports it released', async () => {
    const api = compiledApi(`${uniqueId('api')}-${'y'.repeat(70)}`, 'http://127.0.0.1:1');
    await core.createNamespacedConfigMap({
      namespace,
      body: {
        metadata: {
          name: configMapName(api.api_id),
          namespace,
          labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [API_ID_LABEL]: labelValueFor(api.api_id) },
          annotations: { [RETAIN_ANNOTATION]: 'true' },
        },
        data: { [CONFIG_KEY]: JSON.stringify(compiledConfig([api])) },
      },
    });
    expect(await releaseRetained(core, [namespace], async () => false)).toEqual([api.api_id]);
  });
});
