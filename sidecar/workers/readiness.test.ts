import { describe, expect, it } from 'vitest';
import type { Readiness } from '../../common/health.ts';
import { readinessOf, type Slot } from './primary.ts';

/** A worker slot whose process is running and answers readiness with `answer`. */
function running(index: number, answer: Readiness, rejoining = false): Slot {
  const worker = { isConnected: () => true } as unknown as Slot['worker'];
  const peer = { call: () => Promise.resolve(answer) } as unknown as Slot['peer'];
  return { index, worker, peer, listening: true, started: true, startedAt: 0, restartDelayMs: 500, rejoining, missedPings: 0, pinging: false };
}

/** A worker slot whose process runs but is still loading its code: a call to it would not be answered. */
function loading(index: number, rejoining = false): Slot & { calls: number } {
  const slot = { ...running(index, ready, rejoining), listening: false, started: false, calls: 0 };
  slot.peer = { call: () => ((slot.calls += 1), new Promise<never>(() => undefined)) } as unknown as Slot['peer'];
  return slot;
}

const down = (index: number): Slot => ({ index, worker: undefined, peer: undefined, listening: false, started: false, startedAt: 0, restartDelayMs: 500, rejoining: true, missedPings: 0, pinging: false });
const ready: Readiness = { ready: true, reasons: [], problems: [] };
const starting: Readiness = { ready: false, reasons: ['starting'], problems: [] };

describe('the primary\'s readiness over its workers', () => {
  it('a first start is not ready until every worker is', async () => {
    expect(await readinessOf([running(0, ready), running(1, starting)])).toEqual({ ready: false, reasons: ['worker 1: starting'], problems: [] });
  });

  it('a worker still loading its code is starting, answered at once without a call it could not answer yet', async () => {
    const first = loading(1);
    expect(await readinessOf([running(0, ready), first])).toEqual({ ready: false, reasons: ['worker 1: starting'], problems: [] });
    const again = loading(1, true);
    expect(await readinessOf([running(0, ready), again])).toEqual({ ready: true, reasons: [], problems: [{ subject: 'worker 1', reason: 'restarted; not ready yet (starting)' }] });
    expect(first.calls + again.calls).toBe(0);
  });

  it('a restarted worker, down or starting again, is a problem while another serves; ready again, it is neither', async () => {
    expect(await readinessOf([running(0, ready), down(1)])).toEqual({ ready: true, reasons: [], problems: [{ subject: 'worker 1', reason: 'not running; restarting' }] });
    const rejoining = running(1, starting, true);
    expect(await readinessOf([running(0, ready), rejoining])).toEqual({ ready: true, reasons: [], problems: [{ subject: 'worker 1', reason: 'restarted; not ready yet (starting)' }] });
    (rejoining.peer as unknown as { call: () => Promise<Readiness> }).call = () => Promise.resolve(ready);
    expect(await readinessOf([running(0, ready), rejoining])).toEqual(ready);
    // Once it has been ready, a later "not ready" is a reason again (Redis gone while failing closed, say).
    (rejoining.peer as unknown as { call: () => Promise<Readiness> }).call = () => Promise.resolve({ ready: false, reasons: ['redis reconnecting'], problems: [] });
    expect(await readinessOf([running(0, ready), rejoining])).toEqual({ ready: false, reasons: ['worker 1: redis reconnecting'], problems: [] });
  });

  it('with no worker serving, it is not ready', async () => {
    expect(await readinessOf([down(0), running(1, starting, true)])).toEqual({
      ready: false,
      reasons: ['no worker running'],
      problems: [
        { subject: 'worker 0', reason: 'not running; restarting' },
        { subject: 'worker 1', reason: 'restarted; not ready yet (starting)' },
      ],
    });
  });
});
