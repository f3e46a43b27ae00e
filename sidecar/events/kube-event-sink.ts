import { createHash } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeEventWriter } from '../../common/kube-events.ts';
import type { Logger } from '../../common/logger.ts';
import { apiVersion } from '../../crds/kinds.ts';
import type { SmoothingEvent, SmoothingEventSink } from '../limits/types.ts';
import type { SidecarMetrics } from '../metrics.ts';

export interface KubeEventSinkOptions {
  kubeConfig: KubeConfig;
  instanceId: string;
  logger: Logger;
  metrics: SidecarMetrics;
  /** The same transition within this window updates one Event's series. */
  windowMs?: number;
  /** API writes allowed at once, then per second. */
  burst?: number;
  perSecond?: number;
  /** Series remembered at most (common/kube-events.ts). */
  maxSeries?: number;
}

const limiterDigest = (limiterKey: string): string => createHash('sha256').update(limiterKey).digest('hex').slice(0, 16);

/**
 * Smoothing events as Events on the resource whose smoothing fired, through the writer
 * both binaries share (common/kube-events.ts). Only repeats of one transition (the same
 * limiter, from and to the same allowance) within the window fold into one Event's series:
 * an Event's note cannot change once written, so a series of different transitions showed
 * its first one alone. The limiter is named by a digest, never by its key.
 */
export class KubeEventSink implements SmoothingEventSink {
  readonly #writer: KubeEventWriter;

  constructor(options: KubeEventSinkOptions) {
    this.#writer = new KubeEventWriter({
      kubeConfig: options.kubeConfig,
      controller: 'gw.dev/sidecar',
      instance: options.instanceId,
      logger: options.logger,
      windowMs: options.windowMs,
      burst: options.burst,
      perSecond: options.perSecond,
      maxSeries: options.maxSeries,
      onWrite: (reason, result) => options.metrics.events.inc({ reason, result }),
    });
  }

  emit(event: SmoothingEvent): void {
    const { kind, namespace, name, uid } = event.source;
    this.#writer.write({
      regarding: { apiVersion, kind, namespace, name, uid },
      type: 'Normal',
      reason: event.reason,
      action: 'Smoothing',
      note: `allowance ${event.oldAllowance} -> ${event.newAllowance} (limiter ${limiterDigest(event.limiterKey)})`,
      time: event.time,
    });
  }

  close(): Promise<void> {
    return this.#writer.close();
  }
}
