import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cpuQuota } from './cpu-quota.ts';
import { cpuSeconds } from './http-load.ts';

/** Two threads that spin for `ms`: two cores' worth of work, were nothing holding them back. */
function spinTwoThreads(ms: number) {
  const script = `
const { Worker } = require('node:worker_threads');
const spin = 'const until = Date.now() + ${ms}; while (Date.now() < until) {}';
new Worker(spin, { eval: true });
eval(spin);`;
  return spawn(process.execPath, ['-e', script], { stdio: 'ignore' });
}

describe('bench: a CPU quota for a target', () => {
  it('holds a process and every thread it runs to the quota, and leaves nothing behind', async () => {
    const quota = await cpuQuota(0.5);
    if (typeof quota === 'string') throw new Error(`this machine gives no CPU quota: ${quota}`);
    const child = spinTwoThreads(1_000);
    const exited = new Promise((resolve) => child.once('exit', resolve));
    await quota.add([child.pid!]);
    const started = performance.now();
    const cpuAtStart = cpuSeconds([child.pid!]);
    await new Promise((resolve) => setTimeout(resolve, 600));
    const used = cpuSeconds([child.pid!]) - cpuAtStart;
    const wall = (performance.now() - started) / 1000;
    // Unheld, two spinning threads use two cores; under the quota, half of one (with a tick of slack).
    expect(used / wall).toBeLessThan(0.5 + 0.1);
    expect(used / wall).toBeGreaterThan(0.3);
    child.kill();
    await exited;
    expect(existsSync(quota.dir)).toBe(true);
    await quota.remove();
    expect(existsSync(quota.dir)).toBe(false);
  });

  it('moves what still runs under the quota back out when it is removed', async () => {
    const quota = await cpuQuota(0.2);
    if (typeof quota === 'string') throw new Error(`this machine gives no CPU quota: ${quota}`);
    const child = spinTwoThreads(2_000);
    const exited = new Promise((resolve) => child.once('exit', resolve));
    await quota.add([child.pid!]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(readFileSync(`${quota.dir}/cgroup.procs`, 'utf8').split('\n')).toContain(String(child.pid));
    await quota.remove();
    expect(existsSync(quota.dir)).toBe(false);
    const before = cpuSeconds([child.pid!]);
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 500));
    // Free again: both threads run (on a machine of two cores or more, beside this test's own work).
    expect((cpuSeconds([child.pid!]) - before) / ((performance.now() - started) / 1000)).toBeGreaterThan(0.8);
    child.kill();
    await exited;
  });
});
