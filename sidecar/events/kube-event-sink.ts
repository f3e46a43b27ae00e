import { createHash, randomBytes } from 'node:crypto';
import {
  EventsV1Api,
  PatchStrategy,
  V1MicroTime,
  setHeaderOptions,
  type EventsV1Event,
  type KubeConfig,
} from '@kubernetes/client-node';
import type { Logger } from '../../common/logger.ts';
import { apiVersion } from '../../crds/kinds.ts';
import type { SmoothingEvent, SmoothingEventSink } from '../limits/types.ts';
import type { SidecarMetrics } from '../metrics.ts';
import { TokenBucket } from './token-bucket.ts';

export interface KubeEventSinkOptions {
  kubeConfig: KubeConfig;
  instanceId: string;
  logger: Logger;
  metrics: SidecarMetrics;
  /** Same (resource, reason) within this window updates one Event's series. */
  windowMs?: number;
  /** API writes allowed at once, then per second. */
  burst?: number;
  perSecond?: number;
}

interface Aggregate {
  latest: SmoothingEvent;
  count: number;
  /** Event name once created; null before. */
  name: string | null;
  lastObserved: Date;
  /** Observations not yet written to the API server. */
  dirty: boolean;
}

const reportingController = 'gw.dev/sidecar';

const limiterDigest = (limiterKey: string): string => createHash('sha256').update(limiterKey).digest('hex').slice(0, 16);

function noteOf(event: SmoothingEvent): string {
  return `allowance ${event.oldAllowance} -> ${event.newAllowance} (limiter ${limiterDigest(event.limiterKey)})`;
}

/**
 * Smoothing events as events.k8s.io/v1 Events on the resource whose smoothing fired.
 * Repeats of one (resource, reason) within the window update that Event's series
 * (count, lastObservedTime) instead of creating new ones, and every API write takes a
 * token from a bucket, so a burst of smoothing costs the API server a bounded number of
 * writes: observations that find the bucket empty are folded into the next write.
 * API errors are logged and counted, never thrown into the request path.
 */
export class KubeEventSink implements SmoothingEventSink {
  readonly #api: EventsV1Api;
  readonly #options: KubeEventSinkOptions;
  readonly #windowMs: number;
  readonly #bucket: TokenBucket;
  readonly #aggregates = new Map<string, Aggregate>();
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(options: KubeEventSinkOptions) {
    this.#options = options;
    this.#api = options.kubeConfig.makeApiClient(EventsV1Api);
    this.#windowMs = options.windowMs ?? 10 * 60_000;
    this.#bucket = new TokenBucket(options.burst ?? 10, options.perSecond ?? 1);
  }

  emit(event: SmoothingEvent): void {
    const { kind, namespace, name } = event.source;
    const id = `${kind}/${namespace}/${name}/${event.reason}`;
    const existing = this.#aggregates.get(id);
    if (existing !== undefined && event.time.getTime() - existing.lastObserved.getTime() <= this.#windowMs) {
      existing.count += 1;
      existing.latest = event;
      existing.lastObserved = event.time;
      existing.dirty = true;
    } else {
      this.#aggregates.set(id, { latest: event, count: 1, name: null, lastObserved: event.time, dirty: true });
    }
    this.#schedule(0);
  }

  #schedule(delayMs: number): void {
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#flushing = this.#flushing.then(() => this.#flush());
    }, delayMs);
    this.#timer.unref();
  }

  async #flush(): Promise<void> {
    for (const aggregate of this.#aggregates.values()) {
      if (!aggregate.dirty) continue;
      if (!this.#bucket.take()) {
        this.#schedule(this.#bucket.waitMs());
        return;
      }
      aggregate.dirty = false;
      await this.#write(aggregate);
    }
  }

  async #write(aggregate: Aggregate): Promise<void> {
    const { reason } = aggregate.latest;
    try {
      if (aggregate.name !== null && (await this.#patchSeries(aggregate))) {
        this.#options.metrics.events.inc({ reason, result: 'aggregated' });
        return;
      }
      await this.#create(aggregate);
      this.#options.metrics.events.inc({ reason, result: 'created' });
    } catch (err) {
      this.#options.metrics.events.inc({ reason, result: 'failed' });
      this.#options.logger.warn({ err, reason, source: aggregate.latest.source }, 'smoothing Event not written');
    }
  }

  /** False when the Event is gone (expired by the API server's TTL): a new one is created instead. */
  async #patchSeries(aggregate: Aggregate): Promise<boolean> {
    // An Event's note is immutable: it keeps the first transition; the series counts the rest.
    const body = {
      series: { count: aggregate.count, lastObservedTime: new V1MicroTime(aggregate.lastObserved) },
    };
    try {
      await this.#api.patchNamespacedEvent(
        { name: aggregate.name ?? '', namespace: aggregate.latest.source.namespace, body },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      return true;
    } catch (err) {
      if ((err as { code?: number }).code === 404) return false;
      throw err;
    }
  }

  async #create(aggregate: Aggregate): Promise<void> {
    const event = aggregate.latest;
    const { kind, namespace, name, uid } = event.source;
    const eventName = `${name}.${Date.now().toString(16)}${randomBytes(3).toString('hex')}`;
    const body: EventsV1Event = {
      metadata: { name: eventName, namespace },
      eventTime: new V1MicroTime(event.time),
      regarding: { apiVersion, kind, namespace, name, uid },
      reason: event.reason,
      type: 'Normal',
      action: 'Smoothing',
      note: noteOf(event),
      reportingController,
      reportingInstance: this.#options.instanceId,
    };
    if (aggregate.count > 1) body.series = { count: aggregate.count, lastObservedTime: new V1MicroTime(aggregate.lastObserved) };
    await this.#api.createNamespacedEvent({ namespace, body });
    aggregate.name = eventName;
  }

  /** Write what is pending (bounded by the bucket) before the process exits. */
  async close(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#flushing;
  }
}
