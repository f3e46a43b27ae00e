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

interface Resources {
  ApiDefinition: ApiDefinition;
  Policy: Policy;
  Key: Key;
  Category: Category;
  PortalProduct: PortalProduct;
}

interface Statuses {
  ApiDefinition: ApiDefinitionStatus;
  Policy: PolicyStatus;
  Key: KeyStatus;
  Category: CategoryStatus;
  PortalProduct: PortalProductStatus;
}

/** The status a controller writes on a resource of kind K. */
export type GwStatus<K extends KindName = KindName> = Statuses[K];

/**
 * A gw custom resource of kind K (of any kind when K is left out) as the API server
 * returns it: the kind's type derived from the zod schemas of crds/ (the CRDs are
 * generated from the same schemas, defaults included, so the API server stores this
 * shape), with Kubernetes' full metadata.
 */
export type GwObject<K extends KindName = KindName> = Omit<Resources[K], 'metadata' | 'status'> & {
  metadata: StoredMeta;
  status?: GwStatus<K> | undefined;
};
