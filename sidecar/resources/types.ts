import type { KeySpec } from '../../crds/schemas/key.ts';

/**
 * What the admin operations read and write among the custom resources (docs/behaviour.md#admin-operations), behind
 * one interface with two homes: the API server in a cluster, the `--config` folder
 * standalone. Every method throws on a store fault (unreachable API server, unwritable
 * folder); "not there" is an ordinary return value, never an exception.
 */

/** An ApiDefinition as the admin operations see it. */
export interface ApiEntry {
  apiId: string;
  namespace: string;
  name: string;
  /** The definition is an OAS one (`spec.oas`), not classic. */
  oas: boolean;
  categories: readonly string[];
  /** When it was created, in ms; null where there is none (a folder's YAML). Of two claiming one api_id, the older holds it. */
  createdMs: number | null;
}

/** A Category resource: its category name (spec.name, else metadata.name). */
export interface CategoryEntry {
  namespace: string;
  name: string;
}

export interface NewKey {
  namespace: string;
  name: string;
  /** The Key resource's spec: every field of the key record plus `key_hash`; never a raw key. */
  spec: KeySpec;
}

/**
 * `added`: the tag was written; `exists`: the product already had it, nothing written;
 * `full`: the product has PRODUCT_MAX_TAGS tags already, nothing written.
 */
export type TagOutcome = 'added' | 'exists' | 'full';

export interface ResourceStore {
  /** Throws, as listCategories does, when a resource may be left out (in a folder, a file that does not parse). */
  listApis(): Promise<ApiEntry[]>;
  listCategories(): Promise<CategoryEntry[]>;
  /** Every ApiDefinition claiming the api_id; throws when there is none and it may be in a resource left out. */
  apisWithId(apiId: string): Promise<ApiEntry[]>;
  /** Throws when a Key of that name exists already. */
  createKey(key: NewKey): Promise<void>;
  /** Adds `{Name: tag}` to the PortalProduct whose spec.id (else metadata.name) is productId; null: no such product. */
  addProductTag(productId: string, tag: string): Promise<TagOutcome | null>;
  /**
   * Removes the ApiDefinition of that api_id from the store without unloading it (docs/behaviour.md#api-states).
   * false: no such API.
   */
  deleteApi(apiId: string): Promise<boolean>;
  /**
   * The reload half of a delete: forgets what the store kept so gateways could go on
   * serving deleted APIs (retained ConfigMaps in a cluster). Returns their api ids.
   */
  releaseDeleted(): Promise<string[]>;
  /** Namespaces the store covers; empty: all namespaces. */
  readonly namespaces: readonly string[];
}
