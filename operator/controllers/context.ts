import type { V1ConfigMap, V1Secret } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import type { SessionStore } from '../../common/session-store.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { ConfigMapWriter } from '../config/config-map-writer.ts';
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
 * What a controller is given: caches to read, and every writer it may use, as
 * interfaces (the operator passes the Kubernetes and Redis ones, unit tests in-memory ones).
 */
export interface ControllerContext {
  log: Logger;
  caches: Caches;
  status: StatusWriter;
  events: EventRecorder;
  finalizers: FinalizerWriter;
  configMaps: ConfigMapWriter;
  keySecrets: KeySecretStore;
  sessions: SessionStore;
  settings: GatewaySettings;
  metrics: OperatorMetrics;
}
