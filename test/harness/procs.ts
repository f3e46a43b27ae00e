import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, closeSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { HarnessStepError } from './errors.ts';
import { join } from 'node:path';

/**
 * Every server the harness starts goes through here, so that none outlives the run:
 * each runs in its own process group (killed as a group), has a pid file under this
 * process's session folder, and is killed on exit or SIGINT/SIGTERM of this process. A
 * detached reaper kills the rest if this process dies without running its handlers
 * (SIGKILL, crash); `.ci/run` sweeps the same pid files as a last resort.
 */

export interface ServerProcess {
  name: string;
  pid: number;
  logPath: string;
  /** Resolves with the exit code (or null on a signal) once the process has exited. */
  exited: Promise<number | null>;
  hasExited(): boolean;
  /** SIGTERM to the group, SIGKILL after the grace period; resolves once it has exited. */
  stop(graceMs?: number): Promise<void>;
}

export interface SpawnOptions {
  name: string;
  command: string;
  args: string[];
  logPath: string;
  /** The program the process runs once `command`, a launcher such as nsenter, has exec'd it. */
  execs?: string;
}

const live = new Map<number, ChildProcess>();
let session: string | undefined;

/** Root of all harness session folders; `.ci/run` sweeps its pid files after a run. */
export function runRoot(): string {
  return process.env.GW_TEST_RUN_ROOT ?? join(tmpdir(), 'gw-test-runs');
}

/** This process's session folder (data, logs, pid files), created on first use. */
export function sessionDir(): string {
  if (session) return session;
  mkdirSync(runRoot(), { recursive: true });
  session = mkdtempSync(join(runRoot(), `${process.pid}-`));
  mkdirSync(join(session, 'pids'));
  installExitHandlers();
  startReaper(session);
  return session;
}

/** A fresh folder inside the session folder for one server's data and logs. */
export function serverDir(prefix: string): string {
  return mkdtempSync(join(sessionDir(), `${prefix}-`));
}

export function spawnServer(opts: SpawnOptions): ServerProcess {
  const pidDir = join(sessionDir(), 'pids');
  const pidFile = (pid: number): string => join(pidDir, `${opts.name}-${pid}.pid`);
  const group = spawnGroup(opts, (pid) => {
    live.delete(pid);
    rmSync(pidFile(pid), { force: true });
  });
  if (group === null) throw new HarnessStepError(`start-${opts.name}`, opts.logPath, `could not run ${opts.command}`);
  // The command name lets a sweeper check the pid still belongs to this server.
  writeFileSync(pidFile(group.pid), `${group.pid} ${commName(opts.execs ?? opts.command)}\n`);
  live.set(group.pid, group.child);
  return { name: opts.name, logPath: opts.logPath, pid: group.pid, exited: group.exited, hasExited: group.hasExited, stop: group.stop };
}

export interface GroupOptions {
  command: string;
  args: string[];
  logPath: string;
  /** The whole environment of the process (default: this process's). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export interface ProcessGroup extends Pick<ServerProcess, 'pid' | 'exited' | 'hasExited' | 'stop'> {
  child: ChildProcess;
}

/**
 * A process in a group of its own (stopped as a group: nothing it started survives it),
 * output appended to `logPath`. `onExit` runs once it has exited. null when it could not
 * be started at all (e.g. a missing binary). Keeping it from outliving its owner is the
 * caller's part.
 */
export function spawnGroup(opts: GroupOptions, onExit: (pid: number) => void = () => undefined): ProcessGroup | null {
  const logFd = openSync(opts.logPath, 'a');
  const child = spawn(opts.command, opts.args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', logFd, logFd] });
  closeSync(logFd);
  const pid = child.pid;
  if (pid === undefined) {
    // spawn reports a missing binary through 'error'; the caller reports it instead.
    child.once('error', () => {});
    return null;
  }
  // A process must not keep its owner alive: the owner's exit handling stops it.
  child.unref();
  let done = false;
  const exited = new Promise<number | null>((resolve) => {
    const finish = (code: number | null): void => {
      if (done) return;
      done = true;
      onExit(pid);
      resolve(code);
    };
    child.once('exit', finish);
    child.once('error', () => finish(null));
  });
  return {
    child,
    pid,
    exited,
    hasExited: () => done,
    stop: async (graceMs = 10_000) => {
      if (!done) {
        killGroup(pid, 'SIGTERM');
        const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      // Children of the process (none expected) go with the group.
      killGroup(pid, 'SIGKILL');
    },
  };
}

/** Whether a process with this pid exists (and is not a zombie). */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

function commName(command: string): string {
  // /proc/PID/comm holds at most 15 characters of the executable's base name.
  return (command.split('/').pop() ?? command).slice(0, 15);
}

export function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}

function killAllNow(): void {
  for (const pid of live.keys()) killGroup(pid, 'SIGKILL');
  live.clear();
  if (!session || !existsSync(session)) return;
  // A node leaves containers, mounts and a network namespace that a plain removal of the
  // folder would not end (and could reach into): the sweep removes those first.
  if (readdirSync(session).some((name) => name.startsWith('node-'))) {
    spawnSync('bash', [SWEEP, session], { stdio: 'inherit' });
  } else {
    rmSync(session, { recursive: true, force: true });
  }
}

function installExitHandlers(): void {
  process.once('exit', killAllNow);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      killAllNow();
      // When nobody else handles the signal, keep its default meaning: end the process.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.once(signal, onSignal);
  }
}

const SWEEP = join(import.meta.dirname, 'sweep.sh');

/**
 * Sweeps sessions under the run root whose owner process is gone (a run killed before its
 * reaper could act, or a reboot that kept /tmp). Returns the folders swept.
 */
export function sweepStaleSessions(root = runRoot()): string[] {
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return [];
  }
  const stale = names
    .filter((n) => {
      const owner = /^(\d+)-/.exec(n)?.[1];
      return owner !== undefined && !isAlive(Number(owner));
    })
    .map((n) => join(root, n));
  if (stale.length > 0) spawnSync('bash', [SWEEP, ...stale], { stdio: 'inherit' });
  return stale;
}

function startReaper(dir: string): void {
  const script = 'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 1; done; exec bash "$3" "$2"';
  const reaper = spawn('bash', ['-c', script, 'gw-test-reaper', String(process.pid), dir, SWEEP], {
    detached: true,
    stdio: 'ignore',
  });
  reaper.unref();
}
