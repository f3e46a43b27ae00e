import type { KubeConfig, V1ConfigMap, V1Secret } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import type { SessionStore } from '../../common/session-store.ts';
import type { GatewaySettings } from '../../crds/settings.ts';
import type { EventRecorder } from '../runtime/event-recorder.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import type { InformerSet } from '../runtime/informer-set.ts';
import type { OperatorMetrics } from '../runtime/metrics.ts';
import type { StatusWriter } from '../runtime/status.ts';

/** The informer caches every controller reads current state from. */
export interface Caches {
  apis: InformerSet<GwObject<'ApiDefinition'>>;
  policies: InformerSet<GwObject<'Policy'>>;
  keys: InformerSet<GwObject<'Key'>>;
  categories: InformerSet<GwObject<'Category'>>;
  products: InformerSet<GwObject<'PortalProduct'>>;
  configMaps: InformerSet<V1ConfigMap>;
  secrets: InformerSet<V1Secret>;
}

/** What a controller is given: clients, caches, and the shared writers. */
export interface ControllerContext {
  kc: KubeConfig;
  log: Logger;
  caches: Caches;
  events: EventRecorder;
  status: StatusWriter;
  sessions: SessionStore;
  settings: GatewaySettings;
  metrics: OperatorMetrics;
}
