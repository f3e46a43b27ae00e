import { CoreV1Api, PatchStrategy, setHeaderOptions, type CoreV1Event, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';

export type EventType = 'Normal' | 'Warning';

const COMPONENT = 'gw-operator';
/** A repeat of the same event within this window bumps the count of the first one. */
const AGGREGATE_WINDOW_MS = 10 * 60 * 1000;
const MAX_REMEMBERED = 5_000;

interface Remembered {
  name: string;
  namespace: string;
  count: number;
  at: number;
}

/** Records an Event on an object. Never throws: an Event that cannot be written is logged and dropped. */
export interface EventRecorder {
  record(obj: KubernetesObject, type: EventType, reason: string, message: string): Promise<void>;
}

/**
 * Kubernetes core/v1 Events on the operator's resources. Repeats of one (object, reason,
 * message) are aggregated into one Event with a count, so a resource failing the same
 * way on every retry cannot flood the API server. Writing an Event never fails a
 * reconcile: it is logged and dropped. Callers never put a raw key in a message.
 */
export class KubeEventRecorder implements EventRecorder {
  readonly #api: CoreV1Api;
  readonly #log: Logger;
  readonly #instance: string;
  readonly #recent = new Map<string, Remembered>();

  constructor(kc: KubeConfig, instance: string, log: Logger) {
    this.#api = kc.makeApiClient(CoreV1Api);
    this.#instance = instance;
    this.#log = log;
  }

  async record(obj: KubernetesObject, type: EventType, reason: string, message: string): Promise<void> {
    const namespace = obj.metadata?.namespace ?? 'default';
    const id = `${obj.metadata?.uid ?? ''}|${reason}|${message}`;
    const now = new Date();
    try {
      const previous = this.#recent.get(id);
      if (previous && now.getTime() - previous.at < AGGREGATE_WINDOW_MS) {
        previous.count += 1;
        previous.at = now.getTime();
        await this.#api.patchNamespacedEvent(
          { name: previous.name, namespace, body: { count: previous.count, lastTimestamp: now.toISOString() } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        );
        return;
      }
      const created = await this.#api.createNamespacedEvent({ namespace, body: this.#event(obj, type, reason, message, now) });
      this.#remember(id, { name: created.metadata?.name ?? '', namespace, count: 1, at: now.getTime() });
    } catch (error) {
      this.#recent.delete(id);
      this.#log.warn({ err: error, reason }, 'could not record event');
    }
  }

  #event(obj: KubernetesObject, type: EventType, reason: string, message: string, now: Date): CoreV1Event {
    const name = obj.metadata?.name ?? 'unknown';
    return {
      metadata: { generateName: `${name.slice(0, 200)}.`, namespace: obj.metadata?.namespace },
      involvedObject: {
        apiVersion: obj.apiVersion,
        kind: obj.kind,
        name,
        namespace: obj.metadata?.namespace,
        uid: obj.metadata?.uid,
        resourceVersion: obj.metadata?.resourceVersion,
      },
      type,
      reason,
      message: message.slice(0, 1024),
      count: 1,
      firstTimestamp: now,
      lastTimestamp: now,
      source: { component: COMPONENT, host: this.#instance },
      reportingComponent: COMPONENT,
      reportingInstance: this.#instance,
    };
  }

  #remember(id: string, entry: Remembered): void {
    if (this.#recent.size >= MAX_REMEMBERED) {
      const oldest = this.#recent.keys().next().value;
      if (oldest !== undefined) this.#recent.delete(oldest);
    }
    this.#recent.set(id, entry);
  }
}
