import { setImmediate as nextTurn } from 'node:timers/promises';

/** How long one piece of work took, and the longest wait for a turn of the event loop while it ran. */
export interface LoopTiming {
  totalMs: number;
  longestWaitMs: number;
}

/**
 * Runs `work` while taking turns of the event loop beside it: the longest wait for one is how
 * long a request in flight in the same process would have waited on the work. Those turns
 * keep the process busy while the work waits on I/O, so its CPU is measured apart (`cpuOf`).
 */
export async function timedInLoop(work: () => Promise<unknown>): Promise<LoopTiming> {
  let done = false;
  const started = performance.now();
  const finished = work().then(() => {
    done = true;
    return performance.now() - started;
  });
  let longestWaitMs = 0;
  let last = started;
  while (!done) {
    await nextTurn();
    const now = performance.now();
    longestWaitMs = Math.max(longestWaitMs, now - last);
    last = now;
  }
  return { totalMs: await finished, longestWaitMs };
}

/** The CPU time `work` cost this process, in ms. */
export async function cpuOf(work: () => Promise<unknown>): Promise<number> {
  const before = process.cpuUsage();
  await work();
  const spent = process.cpuUsage(before);
  return (spent.user + spent.system) / 1000;
}
