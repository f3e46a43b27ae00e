import { describe, expect, it } from 'vitest';
import { WorkQueue } from './work-queue.ts';

const tick = (ms = 5): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await tick();
  }
}

describe('WorkQueue', () => {
  it('runs an item added several times before it starts once', async () => {
    const seen: string[] = [];
    const queue = new WorkQueue(async (key) => void seen.push(key), { concurrency: 1, baseDelayMs: 10, maxDelayMs: 100 });
    queue.add('a');
    queue.add('a');
    queue.add('b');
    queue.add('a');
    queue.start();
    await until(() => seen.length === 2);
    await tick(30);
    expect(seen).toEqual(['a', 'b']);
    await queue.stop();
  });

  it('never runs one item twice at once and re-runs it when re-added while running', async () => {
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    let release: () => void = () => {};
    const queue = new WorkQueue(
      async () => {
        running += 1;
        maxRunning = Math.max(maxRunning, running);
        runs += 1;
        if (runs === 1) await new Promise<void>((resolve) => (release = resolve));
        running -= 1;
      },
      { concurrency: 4, baseDelayMs: 10, maxDelayMs: 100 },
    );
    queue.start();
    queue.add('x');
    await until(() => runs === 1);
    queue.add('x');
    queue.add('x');
    await tick(20);
    expect(runs).toBe(1);
    release();
    await until(() => runs === 2);
    await tick(30);
    expect(runs).toBe(2);
    expect(maxRunning).toBe(1);
    await queue.stop();
  });

  it('skips the re-run of an item re-added while running only when every change that re-added it was its own', async () => {
    const own = new Set(['own-1', 'own-2']);
    const runs: string[] = [];
    let release: () => void = () => {};
    const queue = new WorkQueue<string>(
      async (key) => {
        runs.push(key);
        await new Promise<void>((resolve) => (release = resolve));
      },
      { concurrency: 1, baseDelayMs: 10, maxDelayMs: 100, ownChange: (cause) => own.has(cause) },
    );
    queue.start();
    const runWhileReAdded = async (...causes: Array<string | undefined>): Promise<number> => {
      runs.length = 0;
      queue.add('x');
      await until(() => runs.length === 1);
      for (const cause of causes) queue.add('x', cause);
      release();
      await tick(20);
      if (runs.length === 2) release();
      await tick(10);
      return runs.length;
    };
    expect(await runWhileReAdded('own-1', 'own-2')).toBe(1);
    expect(await runWhileReAdded('own-1', 'someone-else')).toBe(2);
    expect(await runWhileReAdded('own-1', undefined)).toBe(2);
    await queue.stop();
  });

  it('retries a failing item with growing delays until it succeeds', async () => {
    const times: number[] = [];
    const results: string[] = [];
    const queue = new WorkQueue(
      async () => {
        times.push(Date.now());
        const result = times.length < 4 ? 'error' : 'success';
        results.push(result);
        if (result === 'error') throw new Error('not yet');
      },
      { concurrency: 1, baseDelayMs: 20, maxDelayMs: 1_000 },
    );
    queue.start();
    queue.add('k');
    await until(() => times.length === 4);
    expect(results).toEqual(['error', 'error', 'error', 'success']);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(18);
    expect(gaps[1]).toBeGreaterThanOrEqual(38);
    expect(gaps[2]).toBeGreaterThanOrEqual(78);
    expect(queue.depth()).toBe(0);
    await queue.stop();
  });

  it('caps the backoff and limits concurrency', async () => {
    const queue = new WorkQueue(async () => {}, { concurrency: 2, baseDelayMs: 100, maxDelayMs: 300 });
    expect([1, 2, 3, 4, 10].map((n) => queue.backoffMs(n))).toEqual([100, 200, 300, 300, 300]);
    let running = 0;
    let maxRunning = 0;
    const busy = new WorkQueue(
      async () => {
        running += 1;
        maxRunning = Math.max(maxRunning, running);
        await tick(10);
        running -= 1;
      },
      { concurrency: 2, baseDelayMs: 10, maxDelayMs: 10 },
    );
    busy.start();
    for (let i = 0; i < 10; i += 1) busy.add(`item-${i}`);
    await until(() => busy.depth() === 0);
    expect(maxRunning).toBe(2);
    await busy.stop();
  });

  it('drops pending retries on stop and waits for running items', async () => {
    let finished = false;
    let calls = 0;
    const queue = new WorkQueue(
      async (key) => {
        calls += 1;
        if (key === 'slow') {
          await tick(50);
          finished = true;
        } else throw new Error('fail');
      },
      { concurrency: 2, baseDelayMs: 30, maxDelayMs: 30 },
    );
    queue.start();
    queue.add('slow');
    queue.add('bad');
    await tick(10);
    await queue.stop();
    expect(finished).toBe(true);
    await tick(60);
    expect(calls).toBe(2);
    expect(queue.depth()).toBe(0);
  });
});
