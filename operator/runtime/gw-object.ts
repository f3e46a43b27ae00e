import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { KindName } from '../../crds/kinds.ts';
import type {
  ApiDefinition,
  ApiDefinitionStatus,
  Category,
  CategoryStatus,
  Key,
  KeyStatus,
  Policy,
  PolicyStatus,
  PortalProduct,
  PortalProductStatus,
} from '../../crds/schemas/index.ts';

/** Metadata of a stored namespaced object: the API server always sets name and namespace. */
export type StoredMeta = V1ObjectMeta & { name: string; namespace: string };

/**
 * A custom resource as the API server returns it: the kind's type derived from the zod
 * schemas of crds/ (the CRDs are generated from the same schemas, defaults included, so
 * the API server stores exactly this shape), with Kubernetes' full metadata.
 */
type Stored<R extends { metadata: unknown }> = Omit<R, 'metadata'> & { metadata: StoredMeta };

interface Resources {
  ApiDefinition: Stored<ApiDefinition>;
  Policy: Stored<Policy>;
  Key: Stored<Key>;
  Category: Stored<Category>;
  PortalProduct: Stored<PortalProduct>;
}

interface Statuses {
  ApiDefinition: ApiDefinitionStatus;
  Policy: PolicyStatus;
  Key: KeyStatus;
  Category: CategoryStatus;
  PortalProduct: PortalProductStatus;
}

/** A gw custom resource of one kind (of any kind when K is left out). */
export type GwObject<K extends KindName = KindName> = Resources[K];

/** The status a controller writes on a resource of kind K. */
export type GwStatus<K extends KindName = KindName> = Statuses[K];

/** The work-queue key of a namespaced object. */
export const objectKey = (namespace: string, name: string): string => `${namespace}/${name}`;

export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/');
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
