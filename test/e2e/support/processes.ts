import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { killGroup, spawnGroup, type ServerProcess } from '../../harness/procs.ts';

// The e2e tests see process handling through this module only.
export { isAlive } from '../../harness/procs.ts';

/**
 * The gw processes (operator, sidecar) run as local child processes the way a pod runs
 * them: `node <script>` with the identity and settings in the environment. Each runs in
 * its own process group so stopping it also stops anything it started, and every group
 * still running when this process exits is killed, so a failed test or a crash of the
 * caller leaves nothing behind. Unlike the harness's servers (test/harness/procs.ts,
 * whose signal handler SIGKILLs them) these are left to their owner on a signal, so the
 * playground can SIGTERM them first and let them drain and release their Lease.
 */

export const REPO_ROOT = join(import.meta.dirname, '..', '..', '..');
const NODE = join(REPO_ROOT, 'node_modules', '.bin', 'node');

/** stop(): SIGTERM first (the processes drain and release their lease), SIGKILL after `graceMs`. */
export interface GwProcess extends ServerProcess {
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
  // Only what a pod would have, plus PATH/HOME for Node itself: nothing of the test
  // process's own environment (GW_* of the harness) leaks into the product.
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...opts.env };
  const group = spawnGroup({ command: NODE, args: [join(REPO_ROOT, opts.script)], logPath: opts.logPath, env, cwd: REPO_ROOT }, (pid) => live.delete(pid));
  if (group === null) throw new Error(`could not start ${opts.name} (${NODE} ${opts.script})`);
  live.add(group.pid);
  startReaper(group.pid);
  return {
    name: opts.name,
    logPath: opts.logPath,
    pid: group.pid,
    exited: group.exited,
    hasExited: group.hasExited,
    stop: group.stop,
    log: () => readFileSync(opts.logPath, 'utf8'),
  };
}
