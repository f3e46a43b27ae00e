import type { CompiledStreamLimit } from '../../crds/compiled.ts';
import { StreamRateLimitWaitError } from '../limits/errors.ts';
import { SlotTime, SlotWait, type SlotMove, type SlotRelease, type SlotRequest, type SlotReservation, type StreamResource, type StreamSlot, type StreamSlots } from '../limits/stream-limiter.ts';

export interface PrimaryStreamSlotsOptions {
  /** Asks the primary for slots, answered in order (one IPC call with a timeout). */
  reserve(requests: SlotRequest[]): Promise<SlotReservation[]>;
  /** Gives a slot back to the primary (an IPC notice). */
  release(slot: SlotRelease): void;
  /** Tells the primary the resources of this worker's config (an IPC notice). */
  configure(resources: readonly StreamResource[]): void;
  /** Decides a request the primary did not answer for: this worker's own limiters. */
  local: StreamSlots;
  /** The primary did not answer in time: `local` decided. */
  onLocal(error: unknown): void;
}

/**
 * The stream rate-limit resources of one worker of a gateway run as several processes
 * (docs/architecture.md#workers): the primary gives every slot, from one limiter per API and
 * label for all the workers, so a resource admits its `count` per interval across them as it
 * does in one process; the caller waits for its slot here, and one that leaves first gives it
 * back. Should the primary not answer, the worker's own limiter decides, `count` per worker:
 * a request is never lost to the primary's silence. The requests that come due in one turn of
 * the event loop ask in one call, so a busy worker pays the channel's cost once for all of them.
 */
export class PrimaryStreamSlots implements StreamSlots {
  readonly #options: PrimaryStreamSlotsOptions;
  /** One wait per API, so that the callers of one slot go on in arrival order here too. */
  readonly #waits = new Map<string, SlotWait>();
  /** The slots this worker's callers wait for, by the primary's id: the primary may bring them forward. */
  readonly #times = new Map<number, SlotTime>();
  #queue: { request: SlotRequest; resolve: (reservation: SlotReservation) => void; reject: (error: unknown) => void }[] = [];

  constructor(options: PrimaryStreamSlotsOptions) {
    this.#options = options;
  }

  async take(apiId: string, limit: CompiledStreamLimit, maxWaitMs: number): Promise<StreamSlot> {
    let reservation: SlotReservation;
    try {
      reservation = await this.#reserve({ apiId, limit, maxWaitMs });
    } catch (error) {
      this.#options.onLocal(error);
      return this.#options.local.take(apiId, limit, maxWaitMs);
    }
    if ('refusedWaitMs' in reservation) throw new StreamRateLimitWaitError(limit.label, maxWaitMs, reservation.refusedWaitMs);
    const { id } = reservation;
    const time = new SlotTime(reservation.startMs);
    this.#times.set(id, time);
    const release = (): void => {
      this.#times.delete(id);
      this.#options.release({ apiId, id });
    };
    const wait = async (signal?: AbortSignal): Promise<void> => {
      try {
        await this.#waitOf(apiId).until(time, signal, release);
      } finally {
        this.#times.delete(id);
      }
    };
    return { wait, giveBack: release };
  }

  /**
   * The primary's limiters and this worker's own take the config's resources: the primary's
   * are those of every worker, which run the same config (two versions only while a reload is
   * under way, which the primary's limiters bear: StreamLimiter.change).
   */
  configure(resources: readonly StreamResource[]): void {
    this.#options.local.configure(resources);
    const limited = new Set(resources.map((resource) => resource.apiId));
    for (const apiId of this.#waits.keys()) if (!limited.has(apiId)) this.#waits.delete(apiId);
    this.#options.configure(resources);
  }

  /** The primary brought a waiting caller's slot forward: a caller ahead of it, of any worker, gave one back. */
  moved({ id, startMs }: SlotMove): void {
    this.#times.get(id)?.moveTo(startMs);
  }

  #reserve(request: SlotRequest): Promise<SlotReservation> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ request, resolve, reject });
      // After the I/O callbacks of this loop turn: every request they started asks in one call.
      if (this.#queue.length === 1) setImmediate(this.#flush);
    });
  }

  readonly #flush = (): void => {
    const batch = this.#queue;
    this.#queue = [];
    this.#options.reserve(batch.map((queued) => queued.request)).then(
      (reservations) =>
        batch.forEach((queued, i) => {
          const reservation = reservations[i];
          if (reservation === undefined) queued.reject(new Error(`the primary answered ${reservations.length} of ${batch.length} slot requests`));
          else queued.resolve(reservation);
        }),
      (error: unknown) => batch.forEach((queued) => queued.reject(error)),
    );
  };

  #waitOf(apiId: string): SlotWait {
    let wait = this.#waits.get(apiId);
    if (wait === undefined) {
      wait = new SlotWait();
      this.#waits.set(apiId, wait);
    }
    return wait;
  }
}
