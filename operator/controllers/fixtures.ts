import type { z } from 'zod';
import { apiDefinitionSpecSchema, categorySpecSchema, keySpecSchema, policySpecSchema } from '../../crds/schemas/index.ts';
import type { GwObject } from '../runtime/gw-object.ts';

/**
 * Resources for unit tests, as the API server stores them: each spec goes through the
 * schema the CRD is generated from, so defaults are applied. Namespace `ns` unless said.
 */

const metadata = (name: string, generation: number, namespace = 'ns') => ({ name, namespace, uid: `uid-${name}`, generation });

/** A keyless API on /<name>/; `spec` adds to or overrides that. */
export const apiDefinition = (name: string, spec: Partial<z.input<typeof apiDefinitionSpecSchema>> = {}, generation = 1, namespace = 'ns'): GwObject<'ApiDefinition'> => ({
  apiVersion: 'gw.dev/v1alpha1',
  kind: 'ApiDefinition',
  metadata: metadata(name, generation, namespace),
  spec: apiDefinitionSpecSchema.parse({ use_keyless: true, proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' }, ...spec }),
});

/** A policy of 10 requests per 60 s granting the given api_ids. */
export const policy = (name: string, grants: string[] = [], generation = 1): GwObject<'Policy'> => ({
  apiVersion: 'gw.dev/v1alpha1',
  kind: 'Policy',
  metadata: metadata(name, generation),
  spec: policySpecSchema.parse({ rate: 10, per: 60, access_rights: Object.fromEntries(grants.map((apiId) => [apiId, {}])) }),
});

export const key = (name: string, spec: z.input<typeof keySpecSchema> = {}): GwObject<'Key'> => ({
  apiVersion: 'gw.dev/v1alpha1',
  kind: 'Key',
  metadata: metadata(name, 1),
  spec: keySpecSchema.parse(spec),
});

export const category = (name: string, spec: z.input<typeof categorySpecSchema> = {}): GwObject<'Category'> => ({
  apiVersion: 'gw.dev/v1alpha1',
  kind: 'Category',
  metadata: metadata(name, 1),
  spec: categorySpecSchema.parse(spec),
});
