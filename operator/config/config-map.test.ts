import { describe, expect, it } from 'vitest';
import { apiDefinitionSpecSchema } from '../../crds/schemas/index.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import { configHash } from '../../common/compiled-config-map.ts';
import { asWritten, desiredConfigMap, keepOnlyDataDigest, upToDate, withConfig } from './config-map.ts';

const api: GwObject<'ApiDefinition'> = {
  apiVersion: 'gw.dev/v1alpha1',
  kind: 'ApiDefinition',
  metadata: { name: 'orders', namespace: 'shop', uid: 'u-1' },
  spec: apiDefinitionSpecSchema.parse({ use_keyless: true, proxy: { listen_path: '/orders/', target_url: 'http://orders' } }),
};

/** The ConfigMap the operator writes for a compiled config. */
const desiredWith = (json: string) => withConfig(desiredConfigMap(api, 'orders-v1', configHash(json)), json);

describe('compiled ConfigMap', () => {
  it('is named, labelled, annotated and owned per the contract', () => {
    const cm = desiredWith('{"version":1}');
    expect(cm.metadata).toMatchObject({
      name: 'gw-api-orders',
      namespace: 'shop',
      labels: { 'app.kubernetes.io/managed-by': 'gw-operator', 'gw.dev/api-id': 'orders-v1' },
      annotations: { 'gw.dev/config-hash': configHash('{"version":1}') },
    });
    expect(cm.metadata?.ownerReferences).toEqual([
      { apiVersion: 'gw.dev/v1alpha1', kind: 'ApiDefinition', name: 'orders', uid: 'u-1', controller: true, blockOwnerDeletion: false },
    ]);
    expect(cm.data).toEqual({ 'config.json': '{"version":1}' });
  });

  it('is up to date only when content, labels, hash, owner match and no retain mark is left', () => {
    const desired = desiredWith('{"a":1}');
    expect(upToDate(structuredClone(desired), desired)).toBe(true);
    const edited = structuredClone(desired);
    edited.data = { 'config.json': '{"a":2}' };
    expect(upToDate(edited, desired)).toBe(false);
    const extraKey = structuredClone(desired);
    extraKey.data = { ...extraKey.data, extra: 'x' };
    expect(upToDate(extraKey, desired)).toBe(false);
    const retained = structuredClone(desired);
    retained.metadata!.annotations!['gw.dev/retain-until-reload'] = 'true';
    expect(upToDate(retained, desired)).toBe(false);
    const orphan = structuredClone(desired);
    orphan.metadata!.ownerReferences = [];
    expect(upToDate(orphan, desired)).toBe(false);
  });

  it('is judged the same once the cache kept only the digest of its data', () => {
    const desired = desiredWith('{"a":1}');
    const cached = (data: Record<string, string>) => {
      const cm = { ...structuredClone(desired), data };
      keepOnlyDataDigest(cm);
      keepOnlyDataDigest(cm);
      expect(cm.data).toBeUndefined();
      return cm;
    };
    expect(upToDate(cached({ 'config.json': '{"a":1}' }), desired)).toBe(true);
    // A hand edit that kept the hash annotation is still seen, and so is an extra key.
    expect(upToDate(cached({ 'config.json': '{"a":2}' }), desired)).toBe(false);
    expect(upToDate(cached({ 'config.json': '{"a":1}', extra: 'x' }), desired)).toBe(false);
    expect(upToDate(cached({}), desired)).toBe(false);
  });

  it('is kept as the version in force only as the operator wrote it for this ApiDefinition, without what the API server adds', () => {
    const written = desiredWith('{"version":1}');
    const stored = { ...written, metadata: { ...written.metadata, resourceVersion: '7', uid: 'cm-1', managedFields: [{ manager: 'gw' }] } };
    expect(asWritten(stored, api)).toEqual(written);
    const edited = { ...stored, data: { 'config.json': '{"hacked":true}' } };
    const foreign = { metadata: { name: 'gw-api-orders', namespace: 'shop' }, data: { 'config.json': '{"version":1}' } };
    const otherApis = { ...stored, metadata: { ...stored.metadata, ownerReferences: [{ ...stored.metadata.ownerReferences![0]!, uid: 'u-2' }] } };
    const retained = { ...stored, metadata: { ...stored.metadata, annotations: { ...stored.metadata.annotations, 'gw.dev/retain-until-reload': 'true' } } };
    for (const cm of [edited, foreign, otherApis, retained]) expect(asWritten(cm, api)).toBeUndefined();
  });
});
