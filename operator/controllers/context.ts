import type { V1ConfigMap, V1Secret } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import type { SessionStore } from '../../common/session-store.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { ConfigMapWriter } from '../config/config-map-writer.ts';
import { apiIdOf, coveredApiIds } from '../config/compile-api.ts';
import { CacheIndex } from '../kit/cache-index.ts';
import type { FinalizerWriter } from '../kit/controllerutil.ts';
import type { Source } from '../kit/watch.ts';
import type { KeySecretStore } from '../keys/key-secrets.ts';
import type { EventRecorder } from '../runtime/event-recorder.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import type { OperatorMetrics } from '../runtime/metrics.ts';
import type { StatusWriter } from '../runtime/status.ts';

/** The caches every controller reads current state from and watches. */
export interface Caches {
  apis: Source<GwObject<'ApiDefinition'>>;
  policies: Source<GwObject<'Policy'>>;
  keys: Source<GwObject<'Key'>>;
  categories: Source<GwObject<'Category'>>;
  products: Source<GwObject<'PortalProduct'>>;
  configMaps: Source<V1ConfigMap>;
  secrets: Source<V1Secret>;
}

/**
 * The lookups by a field that would otherwise scan a whole kind (operator/kit/cache-index.ts),
 * shared by the controllers that read them, as a manager's field indexes are.
 */
export interface Indexes {
  /** ApiDefinitions by api_id. */
  apisById: CacheIndex<GwObject<'ApiDefinition'>>;
  /** ApiDefinitions by each category they list (a Category counts those of its namespace). */
  apisByCategory: CacheIndex<GwObject<'ApiDefinition'>>;
  /** Policies by each api_id their limits cover: those they grant, or EVERY_API for one without access_rights. */
  policiesByCoveredApi: CacheIndex<GwObject<'Policy'>>;
  /** Keys by each Policy they apply (a name in the Key's own namespace). */
  keysByPolicy: CacheIndex<GwObject<'Key'>>;
  /** Keys by each api_id their own access_rights grant. */
  keysByGrantedApi: CacheIndex<GwObject<'Key'>>;
  /** Keys by the hash of their key: spec.key_hash, else the generated key's (status.key_hash). */
  keysByHash: CacheIndex<GwObject<'Key'>>;
  /** PortalProducts by each product_id they answer to: spec.id and metadata.name (crds/product-id.ts). */
  productsByProductId: CacheIndex<GwObject<'PortalProduct'>>;
}

/** The hash a Key's session is stored under: the one its spec names, else its generated key's, once a reconcile put it in status. */
export const keyHashOf = (key: GwObject<'Key'>): string | undefined => key.spec.key_hash ?? key.status?.key_hash;

/** Builds the indexes over `caches`: before any controller subscribes to them (CacheIndex says why). */
export function indexCaches(caches: Caches): Indexes {
  return {
    apisById: new CacheIndex(caches.apis, (api) => [apiIdOf(api)]),
    apisByCategory: new CacheIndex(caches.apis, (api) => api.spec.categories ?? []),
    policiesByCoveredApi: new CacheIndex(caches.policies, coveredApiIds),
    keysByPolicy: new CacheIndex(caches.keys, (key) => key.spec.apply_policies ?? []),
    keysByGrantedApi: new CacheIndex(caches.keys, (key) => Object.keys(key.spec.access_rights ?? {})),
    keysByHash: new CacheIndex(caches.keys, (key) => {
      const hash = keyHashOf(key);
      return hash === undefined ? [] : [hash];
    }),
    productsByProductId: new CacheIndex(caches.products, (product) => (product.spec.id === undefined ? [product.metadata.name] : [product.spec.id, product.metadata.name])),
  };
}

/**
 * What a controller is given: caches to read, and every writer it may use, as
 * interfaces (the operator passes the Kubernetes and Redis ones, unit tests in-memory ones).
 */
export interface ControllerContext {
  log: Logger;
  caches: Caches;
  indexes: Indexes;
  status: StatusWriter;
  events: EventRecorder;
  finalizers: FinalizerWriter;
  configMaps: ConfigMapWriter;
  keySecrets: KeySecretStore;
  sessions: SessionStore;
  settings: GatewaySettings;
  metrics: OperatorMetrics;
}
