import { randomBytes } from 'node:crypto';
import { readFile, stat, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createFile } from './yaml-folder.ts';

/**
 * The write lock of a `--config` folder: the gateways (processes) serving one folder take it
 * around each admin write, so that two of them never build their edits of a file from the same
 * text. It is a file of the folder, created only if absent (written beside, then hard-linked
 * into place, so it is never seen half-written), holding who took it; hidden, so never read as
 * config. A lock is no guarantee on its own (one taken over from a holder thought gone may
 * still have a live holder): each write also checks that its file is still what it read
 * (yaml-folder.ts), and the lock keeps that check from failing over and over.
 */
export const LOCK_FILE = '.gw-write.lock';

export interface FolderLockOptions {
  /** A lock older than this is a leftover (its holder ended, or hangs), whoever holds it: writes hold it for well under a second. */
  staleMs: number;
  /** How long to wait for the lock before the write fails. */
  waitMs: number;
}

export const FOLDER_LOCK_DEFAULTS: FolderLockOptions = { staleMs: 20_000, waitMs: 25_000 };

/** How long a waiter sleeps between two tries, at most (random below it, so waiters do not keep meeting). */
const POLL_MS = 20;

/** This process among those of its host with its pid: a lock with our pid and not this is a predecessor's (a container started again). */
const PROCESS_ID = randomBytes(6).toString('hex');

interface Holder {
  pid?: unknown;
  host?: unknown;
  process?: unknown;
}

/** The lock as found: its text and how old it is; null when there is none. */
async function lockFound(path: string): Promise<{ text: string; ageMs: number } | null> {
  try {
    const [text, stats] = await Promise.all([readFile(path, 'utf8'), stat(path)]);
    return { text, ageMs: Date.now() - stats.mtimeMs };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Whether the process `pid` of this host runs (EPERM: it runs as another user). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether a lock's holder is gone: too old, or taken on this host by a process that no longer runs. */
function leftOver({ text, ageMs }: { text: string; ageMs: number }, staleMs: number): boolean {
  if (ageMs > staleMs) return true;
  let holder: Holder;
  try {
    holder = JSON.parse(text) as Holder;
  } catch {
    return false; // not ours to judge but by its age
  }
  if (holder.host !== hostname() || typeof holder.pid !== 'number') return false;
  if (holder.pid === process.pid) return holder.process !== PROCESS_ID;
  return !running(holder.pid);
}

/**
 * Removes the left-over lock whose text is `seen`, if it is still there; false when another
 * waiter is at it. Waiters finding it at once take turns through a second lock, the takeover
 * guard, so that one of them cannot remove the lock another took after removing the left-over
 * one. A guard is held for the time of a read and a removal: one older than the stale bound
 * was left by a process that ended within it, and is removed.
 */
async function tookOver(path: string, seen: string, text: string, staleMs: number): Promise<boolean> {
  const guard = `${path}.takeover`;
  if (!(await created(guard, text))) {
    const found = await lockFound(guard);
    if (found !== null && found.ageMs > staleMs) await unlink(guard).catch(() => undefined);
    return false;
  }
  try {
    if ((await readFile(path, 'utf8').catch(() => null)) === seen) await unlink(path).catch(() => undefined);
    return true;
  } finally {
    await unlink(guard).catch(() => undefined);
  }
}

/** Creates the lock holding `text`; false when one exists. */
async function created(path: string, text: string): Promise<boolean> {
  try {
    await createFile(path, text);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

/** Removes the lock if it is still the one taken (a holder overtaken as left over leaves the new holder's). */
async function release(path: string, text: string): Promise<void> {
  if ((await readFile(path, 'utf8').catch(() => null)) === text) await unlink(path).catch(() => undefined);
}

/**
 * Runs `work` holding the write lock of `dir`, waiting for it (bounded) while another
 * process holds it, and taking over one its holder left behind.
 */
export async function withFolderLock<T>(dir: string, work: () => Promise<T>, options: FolderLockOptions = FOLDER_LOCK_DEFAULTS): Promise<T> {
  const path = join(dir, LOCK_FILE);
  const text = `${JSON.stringify({ pid: process.pid, host: hostname(), process: PROCESS_ID, lock: randomBytes(6).toString('hex'), since: new Date().toISOString() })}\n`;
  const deadline = Date.now() + options.waitMs;
  while (!(await created(path, text))) {
    const found = await lockFound(path);
    if (found === null) continue; // released meanwhile
    if (leftOver(found, options.staleMs) && (await tookOver(path, found.text, text, options.staleMs))) continue;
    if (Date.now() >= deadline) {
      throw new Error(`the folder is being written by another process (${LOCK_FILE}: ${found.text.trim()}); gave up waiting after ${options.waitMs} ms`);
    }
    await sleep(Math.random() * POLL_MS);
  }
  try {
    return await work();
  } finally {
    await release(path, text);
  }
}
