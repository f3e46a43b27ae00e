import { randomBytes } from 'node:crypto';
import { EventsV1Api, PatchStrategy, V1MicroTime, setHeaderOptions, type EventsV1Event, type KubeConfig, type V1ObjectReference } from '@kubernetes/client-node';
import { flatKey } from './flat-key.ts';
import type { Logger } from './logger.ts';
import { TokenBucket } from './token-bucket.ts';

/** One thing to tell about an object; `kubectl get events` shows it. */
export interface EventNote {
  regarding: V1ObjectReference;
  type: 'Normal' | 'Warning';
  reason: string;
  action: string;
  /** Never a raw key (docs/architecture.md#security). Cut to the API server's 1 kB limit. */
  note: string;
  /**
   * Notes with one series key (and the same object, type and reason) within the window are
   * one Event whose series counts them; the Event keeps the first note. Default: the note.
   */
  seriesKey?: string;
  time: Date;
}

export type EventWriteResult = 'created' | 'aggregated' | 'failed';

export interface KubeEventWriterOptions {
  kubeConfig: KubeConfig;
  /** The Event's reportingController, e.g. gw.dev/operator. */
  controller: string;
  /** The Event's reportingInstance: the pod. */
  instance: string;
  logger: Logger;
  /** Repeats within this window go into one Event's series. */
  windowMs?: number;
  /** API writes allowed at once, then per second. */
  burst?: number;
  perSecond?: number;
  /** Series remembered at most (default 5,000), so that a storm of distinct notes has a bounded cost. */
  maxSeries?: number;
  onWrite?: (reason: string, result: EventWriteResult) => void;
}

interface Series {
  first: EventNote;
  count: number;
  lastObserved: Date;
  /** The Event's name once created; null before. */
  name: string | null;
  /** Observations not yet written to the API server. */
  dirty: boolean;
}

const NOTE_LIMIT = 1024;
const DEFAULT_MAX_SERIES = 5_000;

/**
 * Both binaries' Events, written as events.k8s.io/v1. Repeats of one note update that
 * Event's series (count, lastObservedTime) instead of creating new ones, and every API
 * write takes a token from a bucket, so a storm of repeats costs the API server a bounded
 * number of writes: observations that find the bucket empty are folded into the next
 * write. Writing happens off the caller's path; a failure is logged and counted, never
 * thrown.
 */
export class KubeEventWriter {
  readonly #api: EventsV1Api;
  readonly #options: KubeEventWriterOptions;
  readonly #windowMs: number;
  readonly #bucket: TokenBucket;
  readonly #maxSeries: number;
  readonly #series = new Map<string, Series>();
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(options: KubeEventWriterOptions) {
    this.#options = options;
    this.#api = options.kubeConfig.makeApiClient(EventsV1Api);
    this.#windowMs = options.windowMs ?? 10 * 60_000;
    this.#bucket = new TokenBucket(options.burst ?? 10, options.perSecond ?? 1);
    this.#maxSeries = options.maxSeries ?? DEFAULT_MAX_SERIES;
  }

  write(note: EventNote): void {
    const { kind, namespace, name, uid } = note.regarding;
    const id = flatKey(kind ?? '', namespace ?? '', name ?? '', uid ?? '', note.type, note.reason, note.seriesKey ?? note.note);
    const existing = this.#series.get(id);
    if (existing !== undefined && note.time.getTime() - existing.lastObserved.getTime() <= this.#windowMs) {
      existing.count += 1;
      existing.lastObserved = note.time;
      existing.dirty = true;
    } else {
      this.#remember(id, { first: note, count: 1, lastObserved: note.time, name: null, dirty: true });
    }
    this.#schedule(0);
  }

  /** Writes what is pending (bounded by the bucket) before the process exits. */
  async close(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#flushing;
  }

  #remember(id: string, series: Series): void {
    this.#series.delete(id);
    if (this.#series.size >= this.#maxSeries) this.#forgetOne();
    this.#series.set(id, series);
  }

  /**
   * Makes room for a series: the oldest one already written goes (it is re-created as a new
   * Event if it recurs), so that observations still to write are kept. Only when every
   * series remembered has some does the oldest go with them.
   */
  #forgetOne(): void {
    let oldest: string | undefined;
    for (const [id, series] of this.#series) {
      oldest ??= id;
      if (!series.dirty) {
        this.#series.delete(id);
        return;
      }
    }
    if (oldest !== undefined) this.#series.delete(oldest);
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
    for (const series of this.#series.values()) {
      if (!series.dirty) continue;
      if (!this.#bucket.take()) {
        this.#schedule(this.#bucket.waitMs());
        return;
      }
      series.dirty = false;
      await this.#write(series);
    }
  }

  async #write(series: Series): Promise<void> {
    const { reason } = series.first;
    try {
      if (series.name !== null && (await this.#patchSeries(series))) {
        this.#options.onWrite?.(reason, 'aggregated');
        return;
      }
      await this.#create(series);
      this.#options.onWrite?.(reason, 'created');
    } catch (err) {
      this.#options.onWrite?.(reason, 'failed');
      this.#options.logger.warn({ err, reason, regarding: series.first.regarding }, 'Event not written');
    }
  }

  /** False when the Event is gone (expired by the API server's TTL): a new one is created instead. */
  async #patchSeries(series: Series): Promise<boolean> {
    const body = { series: { count: series.count, lastObservedTime: new V1MicroTime(series.lastObserved) } };
    try {
      await this.#api.patchNamespacedEvent(
        { name: series.name ?? '', namespace: series.first.regarding.namespace ?? 'default', body },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      return true;
    } catch (err) {
      if ((err as { code?: number }).code === 404) return false;
      throw err;
    }
  }

  async #create(series: Series): Promise<void> {
    const { regarding, type, reason, action, note, time } = series.first;
    const namespace = regarding.namespace ?? 'default';
    const name = `${(regarding.name ?? 'unknown').slice(0, 200)}.${Date.now().toString(16)}${randomBytes(3).toString('hex')}`;
    const body: EventsV1Event = {
      metadata: { name, namespace },
      eventTime: new V1MicroTime(time),
      regarding,
      reason,
      type,
      action,
      note: note.slice(0, NOTE_LIMIT),
      reportingController: this.#options.controller,
      reportingInstance: this.#options.instance,
    };
    if (series.count > 1) body.series = { count: series.count, lastObservedTime: new V1MicroTime(series.lastObserved) };
    await this.#api.createNamespacedEvent({ namespace, body });
    series.name = name;
  }
}
