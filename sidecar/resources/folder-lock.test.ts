import { spawnSync } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LOCK_FILE, withFolderLock } from './folder-lock.ts';

const quick = { staleMs: 10_000, waitMs: 2_000 };

/** A pid of this host that no longer runs: a process started and ended. */
const endedPid = (): number => spawnSync(process.execPath, ['-e', '']).pid!;

describe('the write lock of a folder', () => {
  let dir: string;
  let lock: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-folder-lock-'));
    lock = join(dir, LOCK_FILE);
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('is held while the work runs, says who holds it, and is gone after, the work failed or not', async () => {
    const held = await withFolderLock(dir, async () => JSON.parse(await readFile(lock, 'utf8')) as Record<string, unknown>, quick);
    expect(held).toMatchObject({ pid: process.pid, host: hostname() });
    await expect(withFolderLock(dir, () => Promise.reject(new Error('work failed')), quick)).rejects.toThrow('work failed');
    expect(await readdir(dir)).toEqual([]);
  });

  it('runs works one at a time: a second waits until the first lets the lock go', async () => {
    const order: string[] = [];
    const first = withFolderLock(
      dir,
      async () => {
        order.push('first starts');
        await sleep(100);
        order.push('first ends');
      },
      quick,
    );
    await sleep(20);
    const second = withFolderLock(dir, async () => void order.push('second runs'), quick);
    await Promise.all([first, second]);
    expect(order).toEqual(['first starts', 'first ends', 'second runs']);
  });

  it('gives up after the wait bound while a live holder keeps it, naming the holder, and leaves its lock', async () => {
    const holder = `${JSON.stringify({ pid: process.ppid, host: hostname(), process: 'another', lock: 'x', since: 'now' })}\n`;
    await writeFile(lock, holder);
    const started = Date.now();
    await expect(withFolderLock(dir, async () => 'ran', { staleMs: 10_000, waitMs: 300 })).rejects.toThrow(`pid":${process.ppid}`);
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    expect(await readFile(lock, 'utf8')).toBe(holder);
  });

  it('takes over at once a lock whose holder on this host no longer runs', async () => {
    await writeFile(lock, JSON.stringify({ pid: endedPid(), host: hostname(), process: 'gone', lock: 'x', since: 'then' }));
    expect(await withFolderLock(dir, async () => 'ran', { staleMs: 60_000, waitMs: 100 })).toBe('ran');
    expect(await readdir(dir)).toEqual([]);
  });

  it("takes over at once a lock of this process's pid left by an earlier process (a container started again)", async () => {
    await writeFile(lock, JSON.stringify({ pid: process.pid, host: hostname(), process: 'earlier', lock: 'x', since: 'then' }));
    expect(await withFolderLock(dir, async () => 'ran', { staleMs: 60_000, waitMs: 100 })).toBe('ran');
  });

  it('takes over a lock older than the stale bound, whoever holds it (another host, or text it cannot read)', async () => {
    for (const text of [JSON.stringify({ pid: process.ppid, host: 'another-host' }), 'not json']) {
      await writeFile(lock, text);
      const past = new Date(Date.now() - 5_000);
      await utimes(lock, past, past);
      expect(await withFolderLock(dir, async () => 'ran', { staleMs: 1_000, waitMs: 100 })).toBe('ran');
    }
  });

  it('takes over a left-over lock only once a takeover guard left by a process that ended within it is older than the stale bound', async () => {
    const left = JSON.stringify({ pid: endedPid(), host: hostname(), process: 'gone' });
    await writeFile(lock, left);
    await writeFile(`${lock}.takeover`, left);
    await expect(withFolderLock(dir, async () => 'ran', { staleMs: 60_000, waitMs: 200 })).rejects.toThrow('gave up waiting');
    const past = new Date(Date.now() - 5_000);
    await utimes(`${lock}.takeover`, past, past);
    expect(await withFolderLock(dir, async () => 'ran', { staleMs: 1_000, waitMs: 200 })).toBe('ran');
    expect(await readdir(dir)).toEqual([]);
  });

  it('lets many waiters through one at a time when they take over a left-over lock together', async () => {
    await writeFile(lock, JSON.stringify({ pid: endedPid(), host: hostname(), process: 'gone' }));
    let inside = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 8 }, () =>
        withFolderLock(
          dir,
          async () => {
            inside += 1;
            most = Math.max(most, inside);
            await sleep(5);
            inside -= 1;
          },
          quick,
        ),
      ),
    );
    expect(most).toBe(1);
    expect(await readdir(dir)).toEqual([]);
  });
});
