import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ensureBins } from '../../harness/bins.ts';
import { startControlPlaneServers } from '../../harness/control-plane.ts';
import { HarnessStepError } from '../../harness/errors.ts';
import { startControlPlane, startRedis } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';
import { isAlive, sessionDir, sweepStaleSessions } from '../../harness/procs.ts';
import { ping, startRedisServer } from '../../harness/redis.ts';

const REPO = join(import.meta.dirname, '..', '..', '..');
const NODE = join(REPO, 'node_modules', '.bin', 'node');

async function gone(pids: number[], withinMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (pids.some(isAlive)) {
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
  return true;
}

function pidFiles(): string[] {
  return readdirSync(join(sessionDir(), 'pids'));
}

/** A port held by a plain listener, plus a picker that hands it out on chosen calls. */
async function takenPort(takenOnCalls: number[]): Promise<{ server: Server; calls: () => number; pickPort: () => Promise<number> }> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  let n = 0;
  return {
    server,
    calls: () => n,
    pickPort: async () => (takenOnCalls.includes(++n) ? port : freePort()),
  };
}

describe('harness process hygiene', () => {
  it('stops Redis, starts it again on the same port, and leaves nothing behind', async () => {
    const redis = await startRedis();
    const [first] = redis.pids();
    expect(first).toBeGreaterThan(0);
    expect(await ping(redis.port)).toBe(true);
    expect(pidFiles()).toContain(`redis-server-${first}.pid`);

    await redis.stop();
    expect(await gone([first!])).toBe(true);
    expect(await ping(redis.port)).toBe(false);
    expect(pidFiles()).not.toContain(`redis-server-${first}.pid`);

    await redis.start();
    const [second] = redis.pids();
    expect(second).not.toBe(first);
    expect(await ping(redis.port)).toBe(true);
    await redis.dispose();
    expect(await gone([second!])).toBe(true);
    expect(redis.pids()).toEqual([]);
  });

  it('stops every process of a control plane and removes its data', async () => {
    const plane = await startControlPlane();
    const pids = plane.pids();
    expect(pids).toHaveLength(2);
    const dir = join(plane.kubeconfig, '..');
    expect(existsSync(dir)).toBe(true);

    await plane.restartApiServer();
    const restarted = plane.pids();
    expect(restarted[0]).toBe(pids[0]);
    expect(restarted[1]).not.toBe(pids[1]);
    expect(await gone([pids[1]!])).toBe(true);

    await plane.stop();
    expect(await gone(restarted)).toBe(true);
    expect(existsSync(dir)).toBe(false);
    expect(pidFiles().filter((f) => /^(etcd|kube-apiserver)-/.test(f))).toEqual([]);
  });

  it('retries Redis on another port when the picked one is taken', async () => {
    const taken = await takenPort([1]);
    try {
      const redis = await startRedisServer({ pickPort: taken.pickPort });
      expect(taken.calls()).toBe(2);
      expect(redis.port).not.toBe((taken.server.address() as { port: number }).port);
      expect(await ping(redis.port)).toBe(true);
      await redis.dispose();
    } finally {
      taken.server.close();
    }
  });

  it('retries etcd and kube-apiserver on other ports when a picked one is taken', async () => {
    // Calls: etcd client (taken), etcd peer, etcd client, etcd peer, apiserver (taken), apiserver.
    const taken = await takenPort([1, 5]);
    try {
      const plane = await startControlPlaneServers(await ensureBins(), { pickPort: taken.pickPort });
      expect(taken.calls()).toBe(6);
      expect(plane.server).not.toContain(`:${(taken.server.address() as { port: number }).port}`);
      await plane.stop();
    } finally {
      taken.server.close();
    }
  });

  it('fails a server that cannot start with the step name and a log that stays', async () => {
    const bins = await ensureBins();
    const err = await startControlPlaneServers({ ...bins, etcd: '/bin/false' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HarnessStepError);
    const stepError = err as HarnessStepError;
    expect(stepError.step).toBe('start-etcd');
    expect(stepError.message).toContain(`log: ${stepError.logPath}`);
    expect(existsSync(stepError.logPath)).toBe(true);
    rmSync(stepError.logPath);
  });

  it('sweeps sessions whose owner is gone, and only those', async () => {
    const root = join(sessionDir(), 'sweep-root');
    const gonePid = await new Promise<number>((resolve) => {
      const c = spawn('true');
      c.once('exit', () => resolve(c.pid!));
    });
    const leftover = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    const bystander = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    const session = (owner: number, name: string, proc: typeof leftover): string => {
      const dir = join(root, `${owner}-${name}`);
      mkdirSync(join(dir, 'pids'), { recursive: true });
      writeFileSync(join(dir, 'pids', `sleep-${proc.pid}.pid`), `${proc.pid} sleep\n`);
      return dir;
    };
    const stale = session(gonePid, 'stale', leftover);
    const active = session(process.pid, 'active', bystander);
    try {
      expect(sweepStaleSessions(root)).toEqual([stale]);
      expect(await gone([leftover.pid!])).toBe(true);
      expect(existsSync(stale)).toBe(false);
      expect(isAlive(bystander.pid!)).toBe(true);
      expect(existsSync(active)).toBe(true);
    } finally {
      bystander.kill('SIGKILL');
      leftover.kill('SIGKILL');
    }
  });

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`kills the servers of a process that ends by ${signal}`, async () => {
      const child = spawn(NODE, [join(import.meta.dirname, 'fixtures', 'hold-redis.ts')], { stdio: ['ignore', 'pipe', 'inherit'] });
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`fixture exited with ${code}`)));
      });
      const started = JSON.parse(line) as { pids: number[]; session: string; port: number };
      expect(started.pids).toHaveLength(1);
      expect(await ping(started.port)).toBe(true);

      child.kill(signal);
      // SIGTERM runs the exit handlers; SIGKILL leaves it to the reaper (it polls each second).
      expect(await gone(started.pids, 10_000)).toBe(true);
      expect(await ping(started.port)).toBe(false);
      const deadline = Date.now() + 5_000;
      while (existsSync(started.session) && Date.now() < deadline) await sleep(100);
      expect(existsSync(started.session)).toBe(false);
    });
  }
});
