import { ApiException, CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease, type V1OwnerReference } from '@kubernetes/client-node';
import { performance } from 'node:perf_hooks';
import type { Logger } from '../../common/logger.ts';
import type { SessionStore } from '../../common/session-store.ts';
import { LeaseLapsedError } from '../kit/reconciler.ts';

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationSeconds: number;
  /** How often to try to acquire or renew. */
  retryPeriodMs: number;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  /** Owner references of the Lease when this elector creates it. */
  owner?: () => Promise<V1OwnerReference[] | undefined>;
}

/**
 * Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it: a lease
 * is expired when its holder has not renewed it for leaseDuration as observed on this
 * process's clock (no trust in the other process's clock); every write carries the
 * resourceVersion read, so two candidates racing for it cannot both win (409 Conflict).
 * A leader that cannot renew within the lease duration steps down before anyone else
 * may take over.
 */

/** The part of a lease duration within which a leader must renew, as client-go's renew deadline (10 s of 15). */
const RENEW_DEADLINE = 0.66;

export class LeaderElector {
  readonly #api: CoordinationV1Api;
  readonly #options: LeaderElectionOptions;
  readonly #log: Logger;
  #leading = false;
  #timer: NodeJS.Timeout | undefined;
  #observedRecord = '';
  #observedAt = 0;
  /** When the last successful renewal was sent, on the monotonic clock. */
  #lastRenewAt = 0;
  #running: Promise<void> | undefined;

  constructor(kc: KubeConfig, options: LeaderElectionOptions, log: Logger) {
    this.#api = kc.makeApiClient(CoordinationV1Api);
    this.#options = options;
    this.#log = log.child({ lease: `${options.namespace}/${options.name}`, identity: options.identity });
  }

  isLeader(): boolean {
    return this.#leading;
  }

  /**
   * Whether this process may act as the leader now: it leads, and its last renewal is within
   * the renew deadline. A process that stalled past it (stopped, starved) runs its overdue
   * timers before the renewal that tells it whether it still leads; another may lead by then.
   */
  holdsLease(): boolean {
    return this.#leading && performance.now() - this.#lastRenewAt < this.#options.leaseDurationSeconds * 1000 * RENEW_DEADLINE;
  }

  start(): void {
    const tick = (): void => {
      this.#running = this.#tick().finally(() => {
        this.#running = undefined;
        if (this.#timer !== undefined) this.#timer = setTimeout(tick, this.#options.retryPeriodMs);
      });
    };
    this.#timer = setTimeout(tick, 0);
  }

  /** Stops campaigning and, when leading, releases the lease so a successor takes over at once. */
  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
    if (!this.#leading) return;
    this.#setLeading(false);
    try {
      const lease = await this.#api.readNamespacedLease({ name: this.#options.name, namespace: this.#options.namespace });
      if (lease.spec?.holderIdentity !== this.#options.identity) return;
      lease.spec.holderIdentity = undefined;
      lease.spec.leaseDurationSeconds = 1;
      await this.#api.replaceNamespacedLease({ name: this.#options.name, namespace: this.#options.namespace, body: lease });
      this.#log.info('lease released');
    } catch (error) {
      this.#log.warn({ err: error }, 'could not release lease');
    }
  }

  async #tick(): Promise<void> {
    // Counted from the attempt, not its answer: the others time the lease from when they see it change.
    const attemptAt = performance.now();
    try {
      const acquired = await this.#tryAcquireOrRenew();
      if (acquired) this.#lastRenewAt = attemptAt;
      this.#setLeading(acquired);
    } catch (error) {
      this.#log.warn({ err: error }, 'lease update failed');
      if (!this.holdsLease()) this.#setLeading(false);
    }
  }

  #setLeading(leading: boolean): void {
    if (leading === this.#leading) return;
    this.#leading = leading;
    this.#log.info({ leading }, leading ? 'became leader' : 'lost leadership');
    if (leading) this.#options.onStartedLeading();
    else this.#options.onStoppedLeading();
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const { name, namespace, identity, leaseDurationSeconds } = this.#options;
    const now = new V1MicroTime();
    let lease: V1Lease;
    try {
      lease = await this.#api.readNamespacedLease({ name, namespace });
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 404) throw error;
      const body: V1Lease = {
        metadata: { name, namespace, ownerReferences: await this.#options.owner?.() },
        spec: { holderIdentity: identity, leaseDurationSeconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
      };
      return await this.#write(() => this.#api.createNamespacedLease({ namespace, body }));
    }
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    if (holder !== '' && holder !== identity && !this.#expired(spec)) return false;
    const transitions = (spec.leaseTransitions ?? 0) + (holder === identity ? 0 : 1);
    lease.spec = {
      holderIdentity: identity,
      leaseDurationSeconds,
      acquireTime: holder === identity ? spec.acquireTime : now,
      renewTime: now,
      leaseTransitions: transitions,
    };
    return await this.#write(() => this.#api.replaceNamespacedLease({ name, namespace, body: lease }));
  }

  /** Expired = unchanged (holder, renewTime) for a lease duration, on this process's clock. */
  #expired(spec: NonNullable<V1Lease['spec']>): boolean {
    const record = `${spec.holderIdentity ?? ''}|${String(spec.renewTime ?? '')}`;
    if (record !== this.#observedRecord) {
      this.#observedRecord = record;
      this.#observedAt = Date.now();
    }
    return Date.now() - this.#observedAt > (spec.leaseDurationSeconds ?? this.#options.leaseDurationSeconds) * 1000;
  }

  /** A 409 means someone else wrote the lease first: not leader this round, not an error. */
  async #write(write: () => Promise<V1Lease>): Promise<boolean> {
    try {
      await write();
      return true;
    } catch (error) {
      if (error instanceof ApiException && error.code === 409) return false;
      throw error;
    }
  }
}

/**
 * `store`, writing only while `holdsLease()`. A reconcile that was under way when its process
 * stalled past the lease would otherwise finish its write after another leader acted: a
 * session put back for a Key deleted meanwhile is a revoked key valid again, which no Key owns.
 */
export function leaderOnlySessions(store: SessionStore, holdsLease: () => boolean): SessionStore {
  const lapsed = (): Promise<never> => Promise.reject(new LeaseLapsedError('not written: the leader lease is not known to be held'));
  return {
    get: (keyHash) => store.get(keyHash),
    getJson: (keyHash) => store.getJson(keyHash),
    put: (keyHash, session) => (holdsLease() ? store.put(keyHash, session) : lapsed()),
    delete: (keyHash) => (holdsLease() ? store.delete(keyHash) : lapsed()),
  };
}
