import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cpuQuota, type CpuQuota } from './cpu-quota.ts';
import { cpuSeconds } from './http-load.ts';

/**
 * Under a new quota of `cores`, a process with two threads that spin for `ms`: two cores' worth
 * of work, were nothing holding it back.
 */
async function spinUnderQuota(cores: number, ms: number): Promise<{ quota: CpuQuota; pid: number; stop(): Promise<void> }> {
  const quota = await cpuQuota(cores);
  if (typeof quota === 'string') throw new Error(`this machine gives no CPU quota: ${quota}`);
  const script = `
const { Worker } = require('node:worker_threads');
const spin = 'const until = Date.now() + ${ms}; while (Date.now() < until) {}';
new Worker(spin, { eval: true });
eval(spin);`;
  const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  await quota.add([child.pid!]);
  return {
    quota,
    pid: child.pid!,
    async stop() {
      child.kill();
      await exited;
    },
  };
}

/** The cores' worth of CPU `pid` uses over the next `ms`. */
async function coresUsed(pid: number, ms: number): Promise<number> {
  const started = performance.now();
  const before = cpuSeconds([pid]);
  await new Promise((resolve) => setTimeout(resolve, ms));
  return (cpuSeconds([pid]) - before) / ((performance.now() - started) / 1000);
}

describe('bench: a CPU quota for a target', () => {
  it('holds a process and every thread it runs to the quota, and leaves nothing behind', async () => {
    const { quota, pid, stop } = await spinUnderQuota(0.5, 1_000);
    const used = await coresUsed(pid, 600);
    // Unheld, two spinning threads use two cores; under the quota, half of one (with a tick of slack).
    expect(used).toBeLessThan(0.5 + 0.1);
    expect(used).toBeGreaterThan(0.3);
    await stop();
    expect(existsSync(quota.dir)).toBe(true);
    await quota.remove();
    expect(existsSync(quota.dir)).toBe(false);
  });

  it('moves what still runs under the quota back out when it is removed', async () => {
    const { quota, pid, stop } = await spinUnderQuota(0.2, 2_000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(readFileSync(`${quota.dir}/cgroup.procs`, 'utf8').split('\n')).toContain(String(pid));
    await quota.remove();
    expect(existsSync(quota.dir)).toBe(false);
    // Free again: both threads run (on a machine of two cores or more, beside this test's own work).
    expect(await coresUsed(pid, 500)).toBeGreaterThan(0.8);
    await stop();
  });
});
