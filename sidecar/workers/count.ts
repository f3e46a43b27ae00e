import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { wholeNumberOption } from '../../common/cli.ts';

/** `--workers`: a number of processes, or `auto` (workerCount below). */
export const workersOption = z.union([z.literal('auto'), wholeNumberOption(1, 64)], { error: 'must be auto or a whole number from 1 to 64' });
export type WorkersOption = z.output<typeof workersOption>;

/**
 * The memory one worker is given room for when `auto` sizes by a memory limit: a worker idles
 * near 100 MiB (docs/architecture.md#workers), and the first share is left to the primary and to
 * the first worker's growth under load.
 */
export const WORKER_MEMORY_BUDGET_BYTES = 128 * 1024 * 1024;

/** What `auto` looks at: the CPUs this process may run on and its cgroup (v2) limits. */
export interface MachineBudget {
  /** CPUs in this process's affinity mask (os.availableParallelism). */
  parallelism: number;
  /** The cgroup's `cpu.max` ("max 100000", or "QUOTA PERIOD"); undefined outside a cgroup v2. */
  cpuMax?: string;
  /** The cgroup's `memory.max` ("max" or bytes); undefined outside a cgroup v2. */
  memoryMax?: string;
}

function readCgroupFile(name: string): string | undefined {
  try {
    return readFileSync(`/sys/fs/cgroup/${name}`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

export function readMachineBudget(): MachineBudget {
  return { parallelism: availableParallelism(), cpuMax: readCgroupFile('cpu.max'), memoryMax: readCgroupFile('memory.max') };
}

/** CPUs a cgroup quota allows, rounded up (a 1.5-CPU limit still gains from a second worker), or undefined when unlimited. */
function cpuQuota(cpuMax: string | undefined): number | undefined {
  const [quota, period] = (cpuMax ?? '').split(/\s+/);
  const q = Number(quota);
  const p = Number(period);
  return Number.isFinite(q) && Number.isFinite(p) && q > 0 && p > 0 ? Math.ceil(q / p) : undefined;
}

/** Workers a memory limit has room for beside the primary, or undefined when unlimited. */
function memoryRoom(memoryMax: string | undefined): number | undefined {
  const bytes = Number(memoryMax);
  return Number.isFinite(bytes) && bytes > 0 ? Math.floor(bytes / WORKER_MEMORY_BUDGET_BYTES) - 1 : undefined;
}

export interface WorkerCount {
  count: number;
  /** Why that many, for the start log. */
  reason: string;
}

/** What else decides whether several workers can serve. */
export interface WorkerNeeds {
  redis: boolean;
  /** The proxy listener: off, on a port chosen at start (0), or on a fixed port. */
  proxy: 'off' | 'any-port' | 'fixed-port';
}

/**
 * The number of gateway processes to run. A number is taken as given (the options already
 * refused more than one where it cannot work). `auto` is one per CPU the process may use,
 * its cgroup's CPU limit included, and no more than its memory limit has room for; and one
 * where more cannot serve: without Redis (in-memory counters belong to one process), with
 * the proxy off (worker 0 alone serves the admin operations), or on port 0 (the workers'
 * SO_REUSEPORT sockets share one port only when it is known before they start).
 */
export function workerCount(option: WorkersOption, needs: WorkerNeeds, budget: MachineBudget = readMachineBudget()): WorkerCount {
  if (option !== 'auto') return { count: option, reason: 'as configured' };
  if (!needs.redis) return { count: 1, reason: 'auto without Redis: in-memory counters belong to one process' };
  if (needs.proxy === 'off') return { count: 1, reason: 'auto with the proxy off: one process serves the admin operations' };
  if (needs.proxy === 'any-port') return { count: 1, reason: 'auto with proxy port 0: workers share a port only when it is fixed' };
  const bounds = [
    { count: budget.parallelism, reason: `${budget.parallelism} CPUs available` },
    { count: cpuQuota(budget.cpuMax), reason: `cgroup CPU limit ${budget.cpuMax}` },
    { count: memoryRoom(budget.memoryMax), reason: `cgroup memory limit ${budget.memoryMax} bytes` },
  ].filter((b): b is WorkerCount => b.count !== undefined);
  const tightest = bounds.reduce((a, b) => (b.count < a.count ? b : a));
  return { count: Math.max(1, tightest.count), reason: `auto: ${tightest.reason}` };
}
