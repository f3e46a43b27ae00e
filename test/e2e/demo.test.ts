import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { REPO_ROOT } from './support/processes.ts';
import { freePort, waitFor } from './support/wait.ts';

/**
 * `npm start` (demo/demo.ts) as a user runs it, on free loopback ports given through
 * the sidecar's GW_*_LISTEN variables and GW_DEMO_UPSTREAM_PORT, so it can run beside
 * anything else on the machine (including a demo on the default ports).
 */

interface Ports {
  proxy: number;
  admin: number;
  health: number;
  upstream: number;
}

interface Demo {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

const DEMO = join(REPO_ROOT, 'demo', 'demo.ts');
const started: Demo[] = [];

async function freePorts(): Promise<Ports> {
  const picked = new Set<number>();
  while (picked.size < 4) picked.add(await freePort());
  const [proxy = 0, admin = 0, health = 0, upstream = 0] = [...picked];
  return { proxy, admin, health, upstream };
}

function runDemo(ports: Ports, args: string[], extraEnv: Record<string, string> = {}): Demo {
  // Only what a user's shell would pass: nothing of the harness's GW_* environment.
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    GW_LISTEN: `127.0.0.1:${ports.proxy}`,
    GW_ADMIN_LISTEN: `127.0.0.1:${ports.admin}`,
    GW_HEALTH_LISTEN: `127.0.0.1:${ports.health}`,
    GW_DEMO_UPSTREAM_PORT: String(ports.upstream),
    ...extraEnv,
  };
  const child = spawn(process.execPath, [DEMO, ...args], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const demo = { child, output: () => output, exited };
  started.push(demo);
  return demo;
}

/** Another process may take a picked port before the demo binds it: then try new ones. */
async function runOnce(): Promise<{ ports: Ports; code: number | null; output: string }> {
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts();
    const demo = runDemo(ports, ['--once']);
    const code = await withTimeout(demo, 90_000);
    if (code === 0 || attempt === 3 || !demo.output().includes('EADDRINUSE')) return { ports, code, output: demo.output() };
  }
}

async function withTimeout(demo: Demo, ms: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  const result = await Promise.race([demo.exited, timeout]);
  clearTimeout(timer);
  if (result === 'timeout') throw new Error(`the demo did not exit within ${ms} ms; output:\n${demo.output()}`);
  return result;
}

/** Whether something accepts TCP connections on the loopback port. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function expectAllClosed(ports: Ports): Promise<void> {
  for (const port of Object.values(ports)) expect(await accepts(port), `port ${port} still accepts connections`).toBe(false);
}

describe('npm start (the standalone demo)', () => {
  afterEach(async () => {
    // A failed test must not leave a demo behind.
    for (const demo of started.splice(0)) {
      if (demo.child.exitCode !== null || demo.child.signalCode !== null) continue;
      demo.child.kill('SIGKILL');
      await demo.exited;
    }
  }, 10_000);

  it('--once on chosen ports runs every printed step successfully, prints those ports and leaves nothing listening', async () => {
    const { ports, code, output } = await runOnce();
    expect(code, output).toBe(0);

    const titles = output.split('\n').filter((line) => line.startsWith('# '));
    const results = output.split('\n').filter((line) => /^(ok|FAIL)\s/.test(line));
    expect(titles.length).toBeGreaterThanOrEqual(5);
    expect(results, output).toHaveLength(titles.length);
    for (const line of results) expect(line).toMatch(/^ok\s/);
    expect(output).toMatch(/^ok\s+A 429\b.*: \{"error":"API Rate Limit Exceeded"\}$/m);
    expect(output).toMatch(/^ok\s+An admin call: create a key.*: key_id \S+/m);

    expect(output).toContain(`gw demo: gateway http://127.0.0.1:${ports.proxy} (admin http://127.0.0.1:${ports.admin}, health http://127.0.0.1:${ports.health}), upstream http://127.0.0.1:${ports.upstream}\n`);
    expect(output).toContain(`curl -i http://127.0.0.1:${ports.proxy}/keyless/get\n`);
    expect(output).toContain(`curl -s -X POST http://127.0.0.1:${ports.admin}/admin/org/keys `);
    expect(output).toContain(`curl -i http://127.0.0.1:${ports.proxy}/auth/anything/hello `);
    expect(output).not.toMatch(/127\.0\.0\.1:808[0-2]\b/);

    await expectAllClosed(ports);
    const copy = /^config: a copy of examples\/ in (\S+);/m.exec(output)?.[1];
    expect(copy, output).toBeDefined();
    expect(existsSync(copy ?? ''), 'the temporary copy of examples/ is removed').toBe(false);
    // The upstream port is rewritten in the copy only.
    expect(readFileSync(join(REPO_ROOT, 'examples', 'keyless-api.yaml'), 'utf8')).toContain('target_url: http://127.0.0.1:9000');
  }, 120_000);

  it('runs until Ctrl-C (SIGINT), then exits 0 and frees its ports', async () => {
    const ports = await freePorts();
    // The sidecar's own variables for the portal secret and the category readers' tokens.
    const tokens = [{ name: 'reader', token: 'demo-reader-token-0123', permissions: ['list:apidefinitions', 'list:categories'] }];
    const demo = runDemo(ports, [], { GW_PORTAL_SECRET: 'chosen-portal-secret', GW_BEARER_TOKENS: JSON.stringify(tokens) });
    await waitFor('the demo to be up', async () => demo.output().includes('Press Ctrl-C to stop.') || (demo.child.exitCode !== null && 'exited'), 60_000, 100);
    expect(demo.child.exitCode, demo.output()).toBeNull();
    const res = await fetch(`http://127.0.0.1:${ports.proxy}/keyless/get`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { path: string }).path).toBe('/get');
    expect(demo.output()).toContain('; portal secret: chosen-portal-secret\n');
    const tag = await fetch(`http://127.0.0.1:${ports.admin}/portal-api/products/starter/tags`, {
      method: 'POST',
      headers: { authorization: 'chosen-portal-secret', 'content-type': 'application/json' },
      body: JSON.stringify({ Name: 'from-the-test' }),
    });
    expect(tag.status, await tag.clone().text()).toBe(200);
    const categories = await fetch(`http://127.0.0.1:${ports.admin}/api/apis/categories`, { headers: { authorization: 'Bearer demo-reader-token-0123' } });
    expect(categories.status, await categories.clone().text()).toBe(200);

    demo.child.kill('SIGINT');
    expect(await withTimeout(demo, 15_000), demo.output()).toBe(0);
    await expectAllClosed(ports);
  }, 120_000);

  it('refuses a variable of the sidecar it cannot take, naming it, with exit 2, and starts nothing', async () => {
    const ports = await freePorts();
    const demo = runDemo(ports, ['--once'], { GW_LOG_LEVEL: 'verbose' });
    expect(await withTimeout(demo, 30_000), demo.output()).toBe(2);
    expect(demo.output()).toMatch(/^gw demo: GW_LOG_LEVEL: /m);
    expect(demo.output()).not.toContain('config: a copy of examples/');
    await expectAllClosed(ports);
  }, 60_000);

  it('refuses a malformed address with a clear error, exit 2, and starts nothing', async () => {
    for (const [name, value] of [
      ['GW_DEMO_UPSTREAM_PORT', 'ninety'],
      ['GW_LISTEN', 'localhost'],
    ] as const) {
      const ports = await freePorts();
      const demo = runDemo(ports, ['--once'], { [name]: value });
      expect(await withTimeout(demo, 30_000), demo.output()).toBe(2);
      expect(demo.output()).toMatch(new RegExp(`^gw demo: invalid .*"${value}"`, 'm'));
      expect(demo.output()).not.toContain('config: a copy of examples/');
      await expectAllClosed(ports);
    }
  }, 60_000);
});
