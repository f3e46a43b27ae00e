/**
 * A CPU quota for the processes of one bench target: a cgroup of its own whose CFS quota lets
 * them use at most `cores` CPUs' worth of time, however many threads they run. The workers
 * suite gives each gateway worker the same share this way, so "two workers against one" is
 * measured on a machine that has no core to spare for the load generator (docs/benchmarks.md#workers).
 *
 * cgroup v2 (`cpu.max`, at the root of the unified hierarchy) or v1 (`cpu.cfs_quota_us`, the
 * `cpu` controller's hierarchy). Creating a cgroup needs root.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** A short period, so a throttled target waits a few ms at a time and not 100 ms (the kernel's default). */
const PERIOD_MICROS = 10_000;

interface Hierarchy {
  root: string;
  limit(dir: string, quotaMicros: number): Promise<void>;
}

const v2: Hierarchy = {
  root: '/sys/fs/cgroup',
  limit: (dir, quotaMicros) => writeFile(join(dir, 'cpu.max'), `${quotaMicros} ${PERIOD_MICROS}`),
};

const v1: Hierarchy = {
  root: '/sys/fs/cgroup/cpu',
  async limit(dir, quotaMicros) {
    await writeFile(join(dir, 'cpu.cfs_period_us'), String(PERIOD_MICROS));
    await writeFile(join(dir, 'cpu.cfs_quota_us'), String(quotaMicros));
  },
};

/** The hierarchy this machine can set a CPU quota in, or why there is none. */
async function hierarchy(): Promise<Hierarchy | string> {
  if (process.getuid?.() !== 0) return 'setting a CPU quota needs root';
  if (existsSync(join(v2.root, 'cgroup.controllers'))) {
    const enabled = (await readFile(join(v2.root, 'cgroup.subtree_control'), 'utf8')).split(/\s+/);
    // Most systemd machines have it on already; where not, it stays on for the root's children.
    if (!enabled.includes('cpu')) await writeFile(join(v2.root, 'cgroup.subtree_control'), '+cpu');
    return v2;
  }
  if (existsSync(join(v1.root, 'cpu.cfs_quota_us'))) return v1;
  return 'no cgroup cpu controller at /sys/fs/cgroup (v2) or /sys/fs/cgroup/cpu (v1)';
}

export interface CpuQuota {
  readonly cores: number;
  /** The cgroup's folder. */
  readonly dir: string;
  /** Puts running processes under the quota (each whole, with all its threads; what they fork later is too). */
  add(pids: readonly number[]): Promise<void>;
  /** Moves what still runs under the quota back to the root and removes the cgroup. */
  remove(): Promise<void>;
}

let made = 0;

/** A new quota of `cores` CPUs, or why this machine cannot give one. */
export async function cpuQuota(cores: number): Promise<CpuQuota | string> {
  const found = await hierarchy();
  if (typeof found === 'string') return found;
  const dir = join(found.root, `gw-bench-${process.pid}-${(made += 1)}`);
  await mkdir(dir);
  await found.limit(dir, Math.round(cores * PERIOD_MICROS));
  const procs = join(dir, 'cgroup.procs');
  return {
    cores,
    dir,
    async add(pids) {
      // One pid per write: the kernel takes a single id each time.
      for (const pid of pids) await writeFile(procs, String(pid));
    },
    async remove() {
      const left = (await readFile(procs, 'utf8')).split('\n').filter(Boolean);
      for (const pid of left) {
        try {
          await writeFile(join(found.root, 'cgroup.procs'), pid);
        } catch {
          // it ended meanwhile
        }
      }
      await rmdir(dir);
    },
  };
}
