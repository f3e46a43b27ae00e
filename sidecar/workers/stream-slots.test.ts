import { describe, expect, it } from 'vitest';
import { StreamRateLimitWaitError } from '../limits/errors.ts';
import { StreamLimiters, type StreamSlots } from '../limits/stream-limiter.ts';
import type { CompiledStreamLimit } from '../../crds/compiled.ts';
import { IpcPeer, type PrimaryMethods, type WorkerMethods } from './ipc.ts';
import { PrimaryStreamSlots } from './stream-slots.ts';

const API = 'payments-api';

/** A caller that takes its slot and waits for it, as the gateway does for a request its limits admit. */
const acquire = async (slots: StreamSlots, apiId: string, limit: CompiledStreamLimit, maxWaitMs: number, signal?: AbortSignal): Promise<void> =>
  (await slots.take(apiId, limit, maxWaitMs)).wait(signal);

/**
 * A primary's limiters and `n` workers' slots, joined by IpcPeers over an asynchronous link
 * as node:cluster's channel joins them. `locals` counts the requests a worker's own limiter decided.
 */
function gateway(n: number, timeoutMs = 1000): { workers: PrimaryStreamSlots[]; primary: StreamLimiters; locals: unknown[] } {
  const primary = new StreamLimiters();
  const locals: unknown[] = [];
  const workers = Array.from({ length: n }, () => {
    const fromWorker: IpcPeer<PrimaryMethods, WorkerMethods> = new IpcPeer<PrimaryMethods, WorkerMethods>(
      (message) => setImmediate(() => toWorker.receive(message)),
      {
        others: () => undefined,
        retainedApis: () => [],
        streamSlots: (requests) => requests.map((request) => primary.reserve(request, (move) => fromWorker.notify('streamMoved', move))),
      },
      { streamRelease: (slot) => primary.release(slot), streamResources: (resources) => primary.configure(resources) },
    );
    const unanswered = { alive: () => undefined, readiness: () => ({ ready: true, reasons: [], problems: [] }), reload: () => undefined, retain: () => undefined, retainedApis: () => [], metrics: () => ({ metrics: [], series: [] }) };
    const toWorker = new IpcPeer<WorkerMethods, PrimaryMethods>((message) => setImmediate(() => fromWorker.receive(message)), unanswered, {
      streamMoved: (move) => slots.moved(move),
    });
    const slots: PrimaryStreamSlots = new PrimaryStreamSlots({
      reserve: (requests) => toWorker.call('streamSlots', requests, timeoutMs),
      release: (slot) => toWorker.notify('streamRelease', slot),
      configure: (resources) => toWorker.notify('streamResources', resources),
      local: new StreamLimiters(),
      onLocal: (error) => locals.push(error),
    });
    return slots;
  });
  return { workers, primary, locals };
}

const settle = (p: Promise<void>, started: number): Promise<{ ok: boolean; ms: number; error?: unknown }> =>
  p.then(
    () => ({ ok: true, ms: Date.now() - started }),
    (error: unknown) => ({ ok: false, ms: Date.now() - started, error }),
  );

describe('PrimaryStreamSlots', () => {
  it('admits a resource\'s count per interval across the workers, as one process does, and refuses the rest at once', async () => {
    const { workers: [a, b], locals } = gateway(2);
    const limit = { label: 'upstream-guard', count: 2, interval_ms: 5000 };
    const started = Date.now();
    const settled = await Promise.all([a!, b!, a!, b!, a!].map((w) => settle(acquire(w, API, limit, 0), started)));
    // Each worker's requests of one turn reach the primary together, so which worker's come first is the channel's order.
    expect(settled.filter((s) => s.ok)).toHaveLength(2);
    for (const refused of settled.filter((s) => !s.ok)) {
      expect(refused.error).toBeInstanceOf(StreamRateLimitWaitError);
      expect(refused.error).toMatchObject({ code: 'stream_rate_limit_wait_exceeded', status: 429 });
      expect((refused.error as StreamRateLimitWaitError).waitMs).toBeGreaterThan(4000);
      expect(refused.ms).toBeLessThan(200);
    }
    expect(locals).toEqual([]);
  });

  it('lets the callers of every worker wait their turn: one slot per interval, back to back', async () => {
    const { workers: [a, b] } = gateway(2);
    const limit = { label: 'l', count: 1, interval_ms: 200 };
    const started = Date.now();
    const settled = await Promise.all([a!, b!, a!].map((w) => settle(acquire(w, API, limit, 10_000), started)));
    expect(settled.every((s) => s.ok)).toBe(true);
    const [first, second, third] = settled.map((s) => s.ms).sort((x, y) => x - y);
    expect(first).toBeLessThan(100);
    expect(second).toBeGreaterThanOrEqual(200);
    expect(third).toBeGreaterThanOrEqual(400);
    expect(Math.max(first!, second!, third!)).toBeLessThan(900);
  });

  it('gives the primary back the slot of a caller that leaves, while waiting or before the primary answered', async () => {
    const { workers: [a, b], primary } = gateway(2);
    const limit = { label: 'l', count: 1, interval_ms: 300 };
    await acquire(a!, API, limit, 0);
    const waiting = new AbortController();
    const leaving = acquire(b!, API, limit, 10_000, waiting.signal);
    setTimeout(() => waiting.abort(new Error('client went away')), 20);
    await expect(leaving).rejects.toThrow('client went away');
    await new Promise((r) => setImmediate(r)); // the notice reaches the primary
    const started = Date.now();
    await acquire(a!, API, limit, 10_000);
    // The slot it left (the next interval), not the one after.
    expect(Date.now() - started).toBeLessThan(450);

    // Left while its call was on the way: the slot it was given (free at once) goes back too.
    const fresh = { label: 'fresh', count: 1, interval_ms: 5000 };
    const early = new AbortController();
    const gone = acquire(b!, 'other-api', fresh, 0, early.signal);
    early.abort(new Error('client left early'));
    await expect(gone).rejects.toThrow('client left early');
    await new Promise((r) => setImmediate(r));
    expect(primary.reserve({ apiId: 'other-api', limit: fresh, maxWaitMs: 0 })).toMatchObject({ startMs: expect.any(Number) });
  });

  it("moves the callers of every worker behind one that leaves up one place", async () => {
    const { workers: [a, b] } = gateway(2);
    const limit = { label: 'l', count: 1, interval_ms: 300 };
    await acquire(a!, API, limit, 0);
    const started = Date.now();
    const leaving = new AbortController();
    const left = acquire(b!, API, limit, 10_000, leaving.signal);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const behind = [acquire(a!, API, limit, 10_000), acquire(b!, API, limit, 10_000)].map((p) => p.then(() => Date.now() - started));
    await new Promise((resolve) => setTimeout(resolve, 30));
    leaving.abort(new Error('client went away'));
    await expect(left).rejects.toThrow('client went away');
    const [first, second] = (await Promise.all(behind)).sort((x, y) => x - y);
    expect(first).toBeGreaterThanOrEqual(290);
    expect(first).toBeLessThan(550);
    expect(second).toBeGreaterThanOrEqual(590);
    expect(second).toBeLessThan(850);
  });

  it('a config that raises a resource brings forward the callers every worker has waiting, and one without it lets them go', async () => {
    const { workers: [a, b] } = gateway(2);
    const slow = { label: 'l', count: 1, interval_ms: 60_000 };
    await acquire(a!, API, slow, 0);
    const started = Date.now();
    const waiting = [acquire(a!, API, slow, 200_000), acquire(b!, API, slow, 200_000)].map((p) => p.then(() => Date.now() - started));
    await new Promise((resolve) => setTimeout(resolve, 50));
    a!.configure([{ apiId: API, limit: { label: 'l', count: 10, interval_ms: 60_000 } }]);
    expect(Math.max(...(await Promise.all(waiting)))).toBeLessThan(1000);

    const queued = [acquire(b!, 'gone-api', slow, 200_000), acquire(b!, 'gone-api', slow, 200_000)].map((p) => p.then(() => Date.now() - started));
    await new Promise((resolve) => setTimeout(resolve, 50));
    b!.configure([{ apiId: API, limit: slow }]);
    expect(Math.max(...(await Promise.all(queued)))).toBeLessThan(1000);
  });

  it('asks for the slots of one event-loop turn\'s requests in one call, each answered in its order', async () => {
    const primary = new StreamLimiters();
    const calls: number[] = [];
    const slots = new PrimaryStreamSlots({
      reserve: async (requests) => {
        calls.push(requests.length);
        return requests.map((request) => primary.reserve(request));
      },
      release: () => undefined,
      configure: () => undefined,
      local: new StreamLimiters(),
      onLocal: () => undefined,
    });
    const limit = { label: 'l', count: 3, interval_ms: 5000 };
    const started = Date.now();
    const settled = await Promise.all(Array.from({ length: 5 }, () => settle(acquire(slots, API, limit, 0), started)));
    expect(settled.map((s) => s.ok)).toEqual([true, true, true, false, false]);
    expect(calls).toEqual([5]);
    await expect(acquire(slots, API, limit, 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
    expect(calls).toEqual([5, 1]);
  });

  it('decides with the worker\'s own limiter when the primary does not answer in time', async () => {
    const locals: unknown[] = [];
    const slots = new PrimaryStreamSlots({
      reserve: (requests) => new IpcPeer<WorkerMethods, PrimaryMethods>(() => undefined, { alive: () => undefined, readiness: () => ({ ready: true, reasons: [], problems: [] }), reload: () => undefined, retain: () => undefined, retainedApis: () => [], metrics: () => ({ metrics: [], series: [] }) }).call('streamSlots', requests, 20),
      release: () => undefined,
      configure: () => undefined,
      local: new StreamLimiters(),
      onLocal: (error) => locals.push(error),
    });
    const limit = { label: 'l', count: 1, interval_ms: 5000 };
    await expect(acquire(slots, API, limit, 0)).resolves.toBeUndefined();
    await expect(acquire(slots, API, limit, 0)).rejects.toBeInstanceOf(StreamRateLimitWaitError);
    expect(locals).toHaveLength(2);
    expect((locals[0] as Error).message).toBe('streamSlots: no answer within 20 ms');
  });
});
