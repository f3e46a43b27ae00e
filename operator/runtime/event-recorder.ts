import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import { KubeEventWriter } from '../../common/kube-events.ts';
import type { Logger } from '../../common/logger.ts';

export type EventType = 'Normal' | 'Warning';

/** Records an Event on an object, off the reconcile's path: it never fails a reconcile. */
export interface EventRecorder {
  record(obj: KubernetesObject, type: EventType, reason: string, message: string): void;
}

/**
 * The operator's Events on its resources, through the writer both binaries share
 * (common/kube-events.ts): a resource failing the same way on every retry is one Event
 * whose series counts the retries, and a storm of reconciles (10,000 Keys created at once)
 * costs the API server a bounded number of writes. Callers never put a raw key in a message.
 */
export class KubeEventRecorder implements EventRecorder {
  readonly #writer: KubeEventWriter;

  constructor(kc: KubeConfig, instance: string, log: Logger) {
    // A burst large enough for a typical apply (the examples make a few dozen Events at
    // once), then a sustained rate the API server does not notice.
    this.#writer = new KubeEventWriter({ kubeConfig: kc, controller: 'gw.dev/operator', instance, logger: log, burst: 100, perSecond: 20 });
  }

  record(obj: KubernetesObject, type: EventType, reason: string, message: string): void {
    const { apiVersion, kind, metadata } = obj;
    this.#writer.write({
      regarding: { apiVersion, kind, name: metadata?.name, namespace: metadata?.namespace, uid: metadata?.uid, resourceVersion: metadata?.resourceVersion },
      type,
      reason,
      action: 'Reconcile',
      note: message,
      time: new Date(),
    });
  }

  /** Writes what is pending before the process exits. */
  close(): Promise<void> {
    return this.#writer.close();
  }
}
