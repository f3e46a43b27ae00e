import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isAlive, REPO_ROOT } from './support/processes.ts';
import { waitFor } from './support/wait.ts';

/**
 * `npm run playground` as a user runs it: a child process that starts its own control
 * plane, Redis, operator and sidecar. Whatever way it ends (--check, or Ctrl-C), none of
 * the processes it started may survive it.
 */

interface Playground {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

const NODE = join(REPO_ROOT, 'node_modules', '.bin', 'node');
const started: Playground[] = [];

function runPlayground(args: string[]): Playground {
  const child = spawn(NODE, [join(REPO_ROOT, 'test', 'playground', 'main.ts'), ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const playground = { child, output: () => output, exited };
  started.push(playground);
  return playground;
}

/** What the playground printed about itself: its processes, its kubeconfig's folder and its log folder. */
function startedProcesses(output: string): { pids: number[]; controlPlaneDir: string; logDir: string } {
  const pids = /^Processes: ([\d ]+)$/m.exec(output)?.[1]?.trim().split(/\s+/).map(Number) ?? [];
  const kubeconfig = /export KUBECONFIG=(\S+)/.exec(output)?.[1] ?? '';
  const log = /^Logs: (\S+)/m.exec(output)?.[1] ?? '';
  return { pids, controlPlaneDir: kubeconfig ? dirname(kubeconfig) : '', logDir: log ? dirname(log) : '' };
}

/** Pids of processes whose command line or environment names `text` (the playground's control plane folder). */
function processesMentioning(text: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    for (const file of ['cmdline', 'environ']) {
      try {
        if (readFileSync(join('/proc', entry, file)).includes(text) && isAlive(Number(entry))) found.push(Number(entry));
      } catch {
        // Gone meanwhile, or not ours to read.
      }
    }
  }
  return [...new Set(found)];
}

async function expectNothingLeft(playground: Playground): Promise<void> {
  const { pids, controlPlaneDir, logDir } = startedProcesses(playground.output());
  // operator, sidecar, etcd, kube-apiserver, redis-server
  expect(pids).toHaveLength(5);
  expect(controlPlaneDir).not.toBe('');
  await waitFor('every process the playground started to be gone', async () => pids.every((pid) => !isAlive(pid)), 15_000);
  // The watchers that would have killed the gw processes had the playground died end with them.
  await waitFor('the playground\'s reapers to end', async () => processesMentioning(`gw-e2e-reaper\0${playground.child.pid}\0`).length === 0, 5_000);
  expect(processesMentioning(controlPlaneDir)).toEqual([]);
  expect(existsSync(logDir)).toBe(false);
}

describe('npm run playground', () => {
  afterEach(async () => {
    // A failed test must not leave a playground behind: SIGTERM is its own clean stop.
    for (const p of started.splice(0)) {
      if (p.child.exitCode !== null || p.child.signalCode !== null) continue;
      p.child.kill('SIGTERM');
      const timer = setTimeout(() => p.child.kill('SIGKILL'), 20_000);
      await p.exited;
      clearTimeout(timer);
    }
  }, 30_000);

  it('--check starts everything, runs the printed commands, stops and exits 0 with no process left', async () => {
    const playground = runPlayground(['--check']);
    const code = await playground.exited;
    const output = playground.output();
    expect(code, output).toBe(0);
    expect(output).toContain('check passed');
    expect(output).not.toMatch(/^FAIL/m);
    for (const command of ['export KUBECONFIG=', 'kubectl get gw -n demo', 'kubectl get events -n demo', '/admin/org/keys', 'curl -si http://127.0.0.1:']) {
      expect(output).toContain(command);
    }
    await expectNothingLeft(playground);
  }, 180_000);

  it('stops everything cleanly on Ctrl-C (SIGINT)', async () => {
    const playground = runPlayground([]);
    await waitFor('the playground to be up', async () => playground.output().includes('Press Ctrl-C to stop everything.') || (playground.child.exitCode !== null && 'exited'), 150_000, 250);
    expect(playground.child.exitCode, playground.output()).toBeNull();
    const { pids } = startedProcesses(playground.output());
    expect(pids.every(isAlive)).toBe(true);
    playground.child.kill('SIGINT');
    const code = await playground.exited;
    expect(code, playground.output()).toBe(0);
    await expectNothingLeft(playground);
  }, 180_000);
});
