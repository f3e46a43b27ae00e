import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The gw processes (operator, sidecar) run as local child processes the way a pod runs
 * them: `node <script>` with the identity and settings in the environment. Each runs in
 * its own process group so stopping it also stops anything it started, and every group
 * still running when this process exits is killed, so a failed test or a crash of the
 * caller leaves nothing behind.
 */

export const REPO_ROOT = join(import.meta.dirname, '..', '..', '..');
const NODE = join(REPO_ROOT, 'node_modules', '.bin', 'node');

export interface GwProcess {
  name: string;
  pid: number;
  logPath: string;
  exited: Promise<number | null>;
  hasExited(): boolean;
  /** SIGTERM first (the processes drain and release their lease), SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  /** The log so far (JSON lines of pino). */
  log(): string;
}

export interface GwProcessOptions {
  name: string;
  /** Script path relative to the repository root, e.g. `operator/main.ts`. */
  script: string;
  env: Record<string, string>;
  logPath: string;
}

const live = new Set<number>();
let exitHookInstalled = false;

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // The group is gone already.
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const pid of live) killGroup(pid, 'SIGKILL');
  });
}

/**
 * The exit hook cannot run when this process is killed outright (SIGKILL, OOM): a
 * detached watcher then kills the group, and ends by itself once the group is gone.
 */
function startReaper(pgid: number): void {
  const script = 'while kill -0 "$1" 2>/dev/null && kill -0 -- "-$2" 2>/dev/null; do sleep 1; done; kill -KILL -- "-$2" 2>/dev/null; exit 0';
  spawn('bash', ['-c', script, 'gw-e2e-reaper', String(process.pid), String(pgid)], { detached: true, stdio: 'ignore' }).unref();
}

/** SIGTERM to every live group at once, without waiting (a signal handler's first move). */
export function signalAll(signal: NodeJS.Signals): void {
  for (const pid of live) killGroup(pid, signal);
}

export function startGwProcess(opts: GwProcessOptions): GwProcess {
  installExitHook();
  const fd = openSync(opts.logPath, 'a');
  // Only what a pod would have, plus PATH/HOME for Node itself: nothing of the test
  // process's own environment (GW_* of the harness) leaks into the product.
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...opts.env };
  const child = spawn(NODE, [join(REPO_ROOT, opts.script)], { cwd: REPO_ROOT, env, detached: true, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const pid = child.pid;
  if (pid === undefined) {
    child.once('error', () => undefined);
    throw new Error(`could not start ${opts.name} (${NODE} ${opts.script})`);
  }
  live.add(pid);
  child.unref();
  startReaper(pid);
  let done = false;
  const exited = new Promise<number | null>((resolve) => {
    const finish = (code: number | null): void => {
      if (done) return;
      done = true;
      live.delete(pid);
      resolve(code);
    };
    child.once('exit', finish);
    child.once('error', () => finish(null));
  });
  return {
    name: opts.name,
    pid,
    logPath: opts.logPath,
    exited,
    hasExited: () => done,
    log: () => readFileSync(opts.logPath, 'utf8'),
    stop: async (graceMs = 10_000) => {
      if (!done) {
        killGroup(pid, 'SIGTERM');
        const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      killGroup(pid, 'SIGKILL');
    },
  };
}

/** Whether a pid names a running process (a zombie counts as gone). */
export function isAlive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}
