import type { Readiness } from '../../common/health.ts';
import type { Logger } from '../../common/logger.ts';
import type { RunningSidecar, WorkerRole } from '../app.ts';
import { FolderResourceStore } from '../resources/folder-store.ts';
import { StreamLimiters } from '../limits/stream-limiter.ts';
import { workerMetrics } from './metrics.ts';
import { IpcPeer, OTHERS_TIMEOUT_MS, RETAINED_TIMEOUT_MS, STREAM_SLOT_TIMEOUT_MS, type PrimaryMethods, type WorkerMethods } from './ipc.ts';
import { PrimaryStreamSlots } from './stream-slots.ts';

const STARTING: Readiness = { ready: false, reasons: ['starting'], problems: [] };
/** How often a worker logs that the primary gave it no stream rate-limit slot in time. */
const LOCAL_SLOTS_WARN_EVERY_MS = 10_000;

export interface PrimaryLink {
  /** What app.ts needs to act as one worker of several. */
  role: WorkerRole;
  /** The sidecar this worker started: from now on the primary's calls reach it. */
  attach(running: RunningSidecar): void;
  /** The primary's notice to stop, or its end (the channel closed): `stop` runs once. */
  onStop(stop: () => void): void;
}

/**
 * This process as worker `index` of a gateway (docs/architecture.md#workers): answers the
 * primary's calls (readiness, reload, retain, the APIs it retains), asks it to run on every other worker what
 * this one did that they must do too and for the slots of stream rate-limit resources, and
 * hands its metrics to the primary's aggregate.
 */
export function linkToPrimary(index: number, siblings: readonly string[], logger: Logger): PrimaryLink {
  let running: RunningSidecar | undefined;
  let stop: (() => void) | undefined;
  let localWarnedAt = Number.NEGATIVE_INFINITY;
  const streams = new PrimaryStreamSlots({
    // Slots the primary gives after this worker stopped waiting (its own limiter decided those
    // requests) would go to nobody, and keep other callers from them: they are given back.
    reserve: (requests) =>
      primary.call('streamSlots', requests, STREAM_SLOT_TIMEOUT_MS, (reservations) =>
        reservations.forEach((reservation, i) => {
          if ('id' in reservation) primary.notify('streamRelease', { apiId: requests[i]!.apiId, id: reservation.id });
        }),
      ),
    release: (slot) => primary.notify('streamRelease', slot),
    configure: (resources) => primary.notify('streamResources', resources),
    local: new StreamLimiters(),
    onLocal: (error) => {
      // Once per interval while the primary stays silent, not once per request.
      if (Date.now() - localWarnedAt < LOCAL_SLOTS_WARN_EVERY_MS) return;
      localWarnedAt = Date.now();
      logger.warn({ err: error }, 'the primary gave no stream rate-limit slot in time: this worker decides alone meanwhile');
    },
  });
  const primary = new IpcPeer<WorkerMethods, PrimaryMethods>(
    (message) => process.send?.(message),
    {
      alive: () => undefined,
      readiness: () => running?.readiness() ?? STARTING,
      reload: async ({ release }) => {
        if (running === undefined) return undefined; // it loads a fresh config as it starts
        if (release) await running.resources.releaseDeleted();
        await running.runtime.reload();
        return undefined;
      },
      retain: ({ apiId }) => {
        if (running?.resources instanceof FolderResourceStore) running.resources.retain(apiId);
        return undefined;
      },
      retainedApis: () => {
        if (!(running?.resources instanceof FolderResourceStore)) return [];
        const retained = running.resources.deletedApiIds();
        return running.runtime.apis().filter((api) => retained.has(api.api_id));
      },
      metrics: () => (running === undefined ? { metrics: [], series: [] } : workerMetrics(running.metrics.registry, running.runtime.apis().map((api) => api.api_id))),
    },
    { stop: () => stop?.(), streamMoved: (move) => streams.moved(move) },
  );
  process.on('message', (message) => primary.receive(message));
  primary.notify('listening', undefined);
  process.on('disconnect', () => {
    primary.close('the primary is gone');
    logger.warn('the primary process is gone: stopping');
    stop?.();
  });
  const role: WorkerRole = {
    index,
    siblings,
    others: {
      reload: (release) => primary.call('others', { method: 'reload', params: { release } }, OTHERS_TIMEOUT_MS),
      retain: (apiId) => primary.call('others', { method: 'retain', params: { apiId } }, OTHERS_TIMEOUT_MS),
      retainedApis: () => primary.call('retainedApis', undefined, RETAINED_TIMEOUT_MS),
      allowance: (event) => primary.notify('allowance', { labels: { kind: event.source.kind, namespace: event.source.namespace, name: event.source.name }, value: event.newAllowance }),
    },
    streams,
  };
  return {
    role,
    attach: (sidecar) => {
      running = sidecar;
      primary.notify('started', undefined);
    },
    onStop: (fn) => {
      stop = fn;
    },
  };
}
