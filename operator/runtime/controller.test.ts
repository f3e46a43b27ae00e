import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Controller } from './controller.ts';
import { OperatorMetrics } from './metrics.ts';

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 30));

describe('Controller', () => {
  it('counts reconciles by result, and its resync skips items reconciled within the period', async () => {
    const runs: string[] = [];
    const metrics = new OperatorMetrics(() => ({}), false);
    const controller = new Controller(
      {
        kind: 'Thing',
        reconcile: async (key) => {
          runs.push(key);
          if (key === 'bad') throw new Error('boom');
        },
      },
      { concurrency: 2, baseDelayMs: 60_000, maxDelayMs: 60_000 },
      metrics,
      pino({ level: 'silent' }),
    );
    controller.queue.start();
    controller.queue.add('a');
    controller.queue.add('b');
    controller.queue.add('bad');
    await settle();
    expect(runs.sort()).toEqual(['a', 'b', 'bad']);
    const counts = (await metrics.reconciles.get()).values.map((v) => `${v.labels.result}=${v.value}`).sort();
    expect(counts).toEqual(['error=1', 'success=2']);

    runs.length = 0;
    controller.resync(['a', 'b', 'c'], 10_000);
    await settle();
    expect(runs).toEqual(['c']);

    runs.length = 0;
    controller.resync(['a'], 0);
    await settle();
    expect(runs).toEqual(['a']);
    await controller.queue.stop();
  });
});
