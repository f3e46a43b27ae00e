import { createHash } from 'node:crypto';

/**
 * Default api_id of an ApiDefinition without `spec.api_id`: the first 24 hex digits of
 * sha256("<namespace>/<name>"). Stable across re-creation and restarts, and distinct
 * for same-named APIs in different namespaces.
 */
export function defaultApiId(namespace: string, name: string): string {
  return createHash('sha256').update(`${namespace}/${name}`).digest('hex').slice(0, 24);
}

/** Manifests without a namespace (folder mode) live in `default`, as kubectl would put them. */
export const defaultNamespace = 'default';

/** The api_id an ApiDefinition claims; safe on unvalidated input (a missing spec gets the default). */
export function apiIdOf(resource: { metadata: { name: string; namespace?: string | undefined }; spec?: { api_id?: unknown } | undefined }): string {
  const explicit = resource.spec?.api_id;
  return typeof explicit === 'string' ? explicit : defaultApiId(resource.metadata.namespace ?? defaultNamespace, resource.metadata.name);
}
