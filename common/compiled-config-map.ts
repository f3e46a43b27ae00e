import { createHash } from 'node:crypto';

/**
 * The compiled-config ConfigMap contract between the operator (writes them) and the
 * sidecars (read them, retain and release them around an admin DELETE): one ConfigMap
 * `gw-api-<ApiDefinition name>` per API, in the API's namespace.
 */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'gw-operator';
export const MANAGED_BY_SELECTOR = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;
export const API_ID_LABEL = 'gw.dev/api-id';
/** SHA-256 of what the operator wrote (also on its webhook configuration): a change is judged on it. */
export const CONFIG_HASH_ANNOTATION = 'gw.dev/config-hash';
/** Set by a sidecar before an admin DELETE: the operator leaves the ConfigMap alone until a reload releases it. */
export const RETAIN_ANNOTATION = 'gw.dev/retain-until-reload';
/**
 * Set with RETAIN_ANNOTATION: the uid of the ApiDefinition whose delete retained the ConfigMap.
 * An ApiDefinition of the same name with another uid was created since: the operator takes the
 * ConfigMap back for it at once.
 */
export const RETAINED_FOR_UID_ANNOTATION = 'gw.dev/retained-for-uid';
export const CONFIG_KEY = 'config.json';

const NAME_PREFIX = 'gw-api-';

export const configMapName = (apiName: string): string => `${NAME_PREFIX}${apiName}`;

/** ConfigMap name `gw-api-<name>` → the ApiDefinition's name, or undefined for other ConfigMaps. */
export function apiNameOf(configMapName: string): string | undefined {
  return configMapName.startsWith(NAME_PREFIX) ? configMapName.slice(NAME_PREFIX.length) : undefined;
}

export const configHash = (json: string): string => createHash('sha256').update(json).digest('hex');


/**
 * The api_id of the API a compiled config carries, read from its JSON without validating
 * the rest, so even a config that is refused is reported under the API's own id (the
 * label holds only a hash of an id too long for a label value).
 */
export function compiledApiId(json: string | undefined): string | undefined {
  let apis: unknown;
  try {
    apis = (JSON.parse(json ?? '') as { apis?: unknown } | null)?.apis;
  } catch {
    return undefined;
  }
  const id: unknown = Array.isArray(apis) ? (apis[0] as { api_id?: unknown } | null | undefined)?.api_id : undefined;
  return typeof id === 'string' && id !== '' ? id : undefined;
}
