import { describe, expect, it } from 'vitest';
import { workerCount, type WorkerNeeds } from './count.ts';

const served: WorkerNeeds = { redis: true, proxy: 'fixed-port' };
const MiB = 1024 * 1024;

describe('workerCount', () => {
  it('takes a number as given', () => {
    expect(workerCount(3, served, { parallelism: 1 })).toEqual({ count: 3, reason: 'as configured' });
  });

  it('auto: one per CPU of the affinity mask when the cgroup sets no limit', () => {
    expect(workerCount('auto', served, { parallelism: 4, cpuMax: 'max 100000', memoryMax: 'max' })).toEqual({ count: 4, reason: 'auto: 4 CPUs available' });
  });

  it('auto: the cgroup CPU limit, rounded up, when it is tighter', () => {
    expect(workerCount('auto', served, { parallelism: 8, cpuMax: '150000 100000' })).toEqual({ count: 2, reason: 'auto: cgroup CPU limit 150000 100000' });
    expect(workerCount('auto', served, { parallelism: 8, cpuMax: '50000 100000' }).count).toBe(1);
  });

  it('auto: no more workers than the memory limit has room for beside the primary', () => {
    expect(workerCount('auto', served, { parallelism: 8, memoryMax: String(512 * MiB) })).toEqual({ count: 3, reason: `auto: cgroup memory limit ${512 * MiB} bytes` });
    // The chart's admin gateway limit: room for one.
    expect(workerCount('auto', served, { parallelism: 8, memoryMax: String(256 * MiB) }).count).toBe(1);
    expect(workerCount('auto', served, { parallelism: 8, memoryMax: String(64 * MiB) }).count).toBe(1);
  });

  it('auto: one where more could not serve', () => {
    const budget = { parallelism: 8 };
    expect(workerCount('auto', { redis: false, proxy: 'fixed-port' }, budget).reason).toBe('auto without Redis: in-memory counters belong to one process');
    expect(workerCount('auto', { redis: true, proxy: 'off' }, budget).count).toBe(1);
    expect(workerCount('auto', { redis: true, proxy: 'any-port' }, budget).count).toBe(1);
  });
});
