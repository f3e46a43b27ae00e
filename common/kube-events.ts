import { createHash } from 'node:crypto';
import { EventsV1Api, PatchStrategy, V1MicroTime, setHeaderOptions, type EventsV1Event, type KubeConfig, type V1ObjectReference } from '@kubernetes/client-node';
import { flatKey } from './flat-key.ts';
import { isNamespaceTerminating } from './kube.ts';
import type { Logger } from './logger.ts';
import { TokenBucket } from './token-bucket.ts';

/** One thing to tell about an object; `kubectl get events` shows it. */
export interface EventNote {
  regarding: V1ObjectReference;
  type: 'Normal' | 'Warning';
  reason: string;
  action: string;
  /** Never a raw key (docs/architecture.md#security). Cut to the API server's limit of 1,024 bytes of UTF-8. */
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
  /** Observations not yet written to the API server, and the time of the first of them. */
  pending: number;
  firstPending: Date;
  lastObserved: Date;
  /** The Event as the last write left it; null before it is created or joined. */
  event: WrittenEvent | null;
}

/** What a series update needs to add to the Event without losing another writer's count. */
interface WrittenEvent {
  name: string;
  resourceVersion: string;
  count: number;
  lastObserved: Date;
}

/** The API server counts the note's UTF-8 bytes, not its characters. */
const NOTE_LIMIT_BYTES = 1024;
const DEFAULT_MAX_SERIES = 5_000;
/** Tries of one write (two API calls each at most) while it races other writers or passes ended series. */
const MAX_ATTEMPTS = 8;

const digest = (text: string, length: number): string => createHash('sha256').update(text).digest('hex').slice(0, length);
const apiCode = (err: unknown): number | undefined => (err as { code?: number }).code;

/** The longest start of `text` within `limit` UTF-8 bytes that ends on a whole character. */
export function truncateUtf8(text: string, limit: number): string {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= limit) return text;
  let end = limit;
  // A continuation byte (10xxxxxx) at the cut means the character that owns it does not fit.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end -= 1;
  return bytes.subarray(0, end).toString('utf8');
}

/**
 * Both binaries' Events, written as events.k8s.io/v1. Repeats of one note update that
 * Event's series (count, lastObservedTime) instead of creating new ones, and every write
 * takes a token from a bucket, so a storm of repeats costs the API server a bounded number
 * of writes: observations that find the bucket empty are folded into the next write.
 * Writing happens off the caller's path; a failure is logged and counted, never thrown.
 *
 * Every gateway writes Events about the same resources, so a series lives on the API server,
 * not in one process: its Event's name follows from what it is about, a writer that finds
 * the name taken adds its own observations to that Event's series (a precondition on the
 * resourceVersion keeps two writers from counting over each other), and a series with no
 * repeat within the window has ended, its next Event named after the one it follows.
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
    const id = flatKey(this.#options.controller, kind ?? '', namespace ?? '', name ?? '', uid ?? '', note.type, note.reason, note.seriesKey ?? note.note);
    const existing = this.#series.get(id);
    if (existing !== undefined && note.time.getTime() - existing.lastObserved.getTime() <= this.#windowMs) {
      if (existing.pending === 0) existing.firstPending = note.time;
      existing.pending += 1;
      existing.lastObserved = note.time;
    } else {
      this.#remember(id, { first: note, pending: 1, firstPending: note.time, lastObserved: note.time, event: null });
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
   * Makes room for a series: the oldest one already written goes (a repeat finds its Event
   * again by name), so that observations still to write are kept. Only when every series
   * remembered has some does the oldest go with them.
   */
  #forgetOne(): void {
    let oldest: string | undefined;
    for (const [id, series] of this.#series) {
      oldest ??= id;
      if (series.pending === 0) {
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
    for (const [id, series] of this.#series) {
      if (series.pending === 0) continue;
      if (!this.#bucket.take()) {
        this.#schedule(this.#bucket.waitMs());
        return;
      }
      await this.#write(id, series);
    }
  }

  async #write(id: string, series: Series): Promise<void> {
    const { reason } = series.first;
    const pending = series.pending;
    const lastObserved = series.lastObserved;
    try {
      const result = await this.#place(id, series, pending, lastObserved);
      series.pending -= pending;
      this.#options.onWrite?.(reason, result);
    } catch (err) {
      series.pending -= pending;
      this.#options.onWrite?.(reason, 'failed');
      // Deleting a namespace refuses an Event about each of its objects; the Events would go with it.
      const level = isNamespaceTerminating(err) ? 'debug' : 'warn';
      this.#options.logger[level]({ err, reason, regarding: series.first.regarding }, 'Event not written');
    }
  }

  /**
   * Adds the pending observations to the series' Event: the one this writer last wrote while
   * it still exists, else the one under the series' name, created if the name is free, joined
   * if its series is still going, passed over for the next name if it has ended.
   */
  async #place(id: string, series: Series, pending: number, lastObserved: Date): Promise<'created' | 'aggregated'> {
    const base = this.#baseName(id, series.first);
    let name = series.event?.name ?? base;
    let known = series.event;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt += 1) {
      if (known === null) {
        try {
          series.event = await this.#create(name, series.first, pending, lastObserved);
          return 'created';
        } catch (err) {
          if (apiCode(err) !== 409) throw err;
        }
        const met = await this.#meet(name, base, series);
        if (typeof met === 'string') name = met;
        if (met === null || typeof met === 'string') continue;
        known = met;
      }
      try {
        series.event = await this.#addToSeries(series.first, known, pending, lastObserved);
        return 'aggregated';
      } catch (err) {
        if (apiCode(err) === 404) {
          name = base;
          known = null;
        } else if (apiCode(err) === 409) {
          // Another writer added to the series first: add to what it left.
          const current = await this.#read(name, series.first);
          known = current === null ? null : written(current);
        } else {
          throw err;
        }
      }
    }
    throw new Error(`Event ${name} kept changing under other writers`);
  }

  /**
   * The Event under a taken name, to join while its series is going; once its series has ended
   * (no observation within the window before ours), the name of the Event that follows it;
   * null if it is gone.
   */
  async #meet(name: string, base: string, series: Series): Promise<WrittenEvent | string | null> {
    const existing = await this.#read(name, series.first);
    if (existing === null) return null;
    const last = existing.series?.lastObservedTime ?? existing.eventTime;
    if (last !== undefined && series.firstPending.getTime() - new Date(last).getTime() > this.#windowMs) {
      return `${base}.${digest(existing.metadata?.uid ?? '', 8)}`;
    }
    return written(existing);
  }

  /**
   * A name every writer derives alike for one series, the regarded object's name first as
   * `kubectl get events` lists it; the digest keeps the note (and anything else) out of it.
   */
  #baseName(id: string, first: EventNote): string {
    const prefix = (first.regarding.name ?? 'unknown').slice(0, 200).replace(/[-.]+$/, '');
    return `${prefix}.${digest(id, 16)}`;
  }

  /**
   * The Event as it stands. A merge patch that changes nothing reads it: the gateways may
   * create and patch Events, not get them (charts/gw/templates/sidecar-rbac.yaml).
   */
  async #read(name: string, first: EventNote): Promise<EventsV1Event | null> {
    try {
      return await this.#api.patchNamespacedEvent(
        { name, namespace: first.regarding.namespace ?? 'default', body: {} },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    } catch (err) {
      if (apiCode(err) === 404) return null;
      throw err;
    }
  }

  /** Fails with 409 when another writer changed the Event since `known` was read. */
  async #addToSeries(first: EventNote, known: WrittenEvent, pending: number, lastObserved: Date): Promise<WrittenEvent> {
    const body = {
      metadata: { resourceVersion: known.resourceVersion },
      // Another gateway's observations may be later than this one's.
      series: { count: known.count + pending, lastObservedTime: new V1MicroTime(Math.max(known.lastObserved.getTime(), lastObserved.getTime())) },
    };
    const event = await this.#api.patchNamespacedEvent(
      { name: known.name, namespace: first.regarding.namespace ?? 'default', body },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    return written(event);
  }

  async #create(name: string, first: EventNote, pending: number, lastObserved: Date): Promise<WrittenEvent> {
    const { regarding, type, reason, action, note, time } = first;
    const namespace = regarding.namespace ?? 'default';
    const body: EventsV1Event = {
      metadata: { name, namespace },
      eventTime: new V1MicroTime(time),
      regarding,
      reason,
      type,
      action,
      note: truncateUtf8(note, NOTE_LIMIT_BYTES),
      reportingController: this.#options.controller,
      reportingInstance: this.#options.instance,
    };
    if (pending > 1) body.series = { count: pending, lastObservedTime: new V1MicroTime(lastObserved) };
    return written(await this.#api.createNamespacedEvent({ namespace, body }));
  }
}

const written = (event: EventsV1Event): WrittenEvent => ({
  name: event.metadata?.name ?? '',
  resourceVersion: event.metadata?.resourceVersion ?? '',
  count: event.series?.count ?? 1,
  lastObserved: new Date(event.series?.lastObservedTime ?? event.eventTime),
});
