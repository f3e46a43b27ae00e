import { spawn, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { killGroup, spawnGroup, type ProcessGroup } from '../harness/procs.ts';
import { keylessApiYaml } from '../support/api-yaml.ts';
import { REPO_ROOT } from './support/processes.ts';
import { waitFor } from './support/wait.ts';

/**
 * The binaries as a user runs them from a checkout: `npm run sidecar -- …` and `npm run
 * operator -- …`, from a shell whose PATH has the system's Node and npm only (npm puts
 * the project's pinned Node first for its scripts; the system Node could not run the
 * TypeScript sources at all).
 */

const userPath = (process.env.PATH ?? '').split(':').filter((dir) => !dir.includes('node_modules')).join(':');
const userEnv = { PATH: userPath, HOME: process.env.HOME ?? '', npm_config_update_notifier: 'false' };
const NODE = join(REPO_ROOT, 'node_modules', '.bin', 'node');

function npmRun(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const result = spawnSync('npm', ['run', '--silent', ...args], { cwd: REPO_ROOT, env: userEnv, encoding: 'utf8', timeout: 60_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** Listening TCP sockets of a network namespace, as `address:port`, from the kernel's own table. */
async function listeners(pid: number): Promise<string[]> {
  const rows = (await readFile(`/proc/${pid}/net/tcp`, 'utf8')).trim().split('\n').slice(1);
  const v6 = (await readFile(`/proc/${pid}/net/tcp6`, 'utf8')).trim().split('\n').slice(1);
  const listening = (row: string): boolean => row.trim().split(/\s+/)[3] === '0A';
  const address = (hex: string): string => {
    const [ip = '', port = ''] = hex.split(':');
    if (ip.length !== 8) return `[${ip}]:${parseInt(port, 16)}`;
    const bytes = ip.match(/../g)!.map((b) => parseInt(b, 16)).reverse();
    return `${bytes.join('.')}:${parseInt(port, 16)}`;
  };
  return [...rows, ...v6].filter(listening).map((row) => address(row.trim().split(/\s+/)[1]!)).sort();
}

describe('npm run sidecar / npm run operator', () => {
  it('npm run sidecar -- --help and npm run operator -- --help print their usage on the pinned Node', () => {
    const sidecar = npmRun(['sidecar', '--', '--help']);
    expect(sidecar.stderr).toBe('');
    expect(sidecar.code).toBe(0);
    expect(sidecar.stdout).toMatch(/^Usage: gw-sidecar \[flags\]/);
    expect(sidecar.stdout).toContain('--admin-listen HOST:PORT');
    const operator = npmRun(['operator', '--', '--help']);
    expect(operator.stderr).toBe('');
    expect(operator.code).toBe(0);
    expect(operator.stdout).toContain('Usage: gw-operator [flags]');
  });

  it('npm run upstream serves the echo upstream the examples point at, until stopped', async () => {
    const child = spawn('npm', ['run', '--silent', 'upstream'], { cwd: REPO_ROOT, env: { ...userEnv, GW_DEMO_UPSTREAM_PORT: '0' }, detached: true });
    try {
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      await waitFor('the upstream listening', () => Promise.resolve(/echo upstream on http:\/\/127\.0\.0\.1:\d+ /.test(out)), 30_000);
      const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)![1]!;
      const echoed = (await (await fetch(`${url}/hello/get?x=1`)).json()) as { method: string; path: string; query: string };
      expect(echoed).toMatchObject({ method: 'GET', path: '/hello/get', query: '?x=1' });
    } finally {
      killGroup(child.pid!, 'SIGTERM');
    }
  });

  describe('standalone with no address flags, in a network namespace of its own', () => {
    // Its own namespace: the default ports are free there whatever runs on this machine,
    // and it has a second address (10.203.0.1) that binding every interface would answer on.
    let dir: string;
    let sidecar: ProcessGroup;
    let logPath: string;

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'gw-npm-run-'));
      logPath = join(dir, 'sidecar.log');
      const configDir = join(dir, 'config');
      await mkdir(configDir);
      await writeFile(join(configDir, 'api.yaml'), keylessApiYaml('hello', '/hello/', 'http://127.0.0.1:9000'));
      const setUp = 'ip link set lo up && ip addr add 10.203.0.1/32 dev lo && exec npm run --silent sidecar -- --config "$0"';
      const started = spawnGroup({ command: 'unshare', args: ['--net', 'bash', '-c', setUp, configDir], logPath, env: { ...userEnv, GW_LOG_LEVEL: 'info' }, cwd: REPO_ROOT });
      if (started === null) throw new Error('could not run unshare');
      sidecar = started;
      // Until its warm-up ends, the process also has the warm-up's loopback listeners.
      await waitFor(
        'the sidecar listening and warmed up',
        async () => {
          if (sidecar.hasExited()) throw new Error(`the sidecar exited:\n${await readFile(logPath, 'utf8')}`);
          // Until unshare has run, the process is still in this namespace, whose sockets are not the sidecar's.
          const own = (await readlink(`/proc/${sidecar.pid}/ns/net`)) !== (await readlink('/proc/self/ns/net'));
          const log = await readFile(logPath, 'utf8');
          return own && log.includes('gw-sidecar listening') && log.includes('request path warmed up');
        },
        60_000,
      );
    });

    afterAll(async () => {
      await sidecar?.stop(5_000);
      if (sidecar) killGroup(sidecar.pid, 'SIGKILL');
      if (dir) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    });

    it('listens on 127.0.0.1 only, and serves a request through the proxy', async () => {
      expect(await listeners(sidecar.pid), await readFile(logPath, 'utf8')).toEqual(['127.0.0.1:8080', '127.0.0.1:8081', '127.0.0.1:8082']);

      // Inside the namespace: an upstream on the API's target, a request through the proxy,
      // and the admin port tried on the namespace's other address.
      const probe = `
        const { startEchoUpstream } = await import(${JSON.stringify(join(REPO_ROOT, 'demo', 'upstream.ts'))});
        const upstream = await startEchoUpstream(9000);
        const proxied = await fetch('http://127.0.0.1:8080/hello/get');
        const ready = await fetch('http://127.0.0.1:8082/readyz');
        const other = await fetch('http://10.203.0.1:8081/gw/reload').then((r) => 'answered ' + r.status, (e) => e.cause?.code ?? String(e));
        console.log(JSON.stringify({ proxied: proxied.status, path: (await proxied.json()).path, ready: ready.status, other }));
        await upstream.close();
      `;
      const result = await new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn('nsenter', [`--net=/proc/${sidecar.pid}/ns/net`, NODE, '--input-type=module', '-e', probe], { cwd: REPO_ROOT, env: userEnv });
        let out = '';
        child.stdout.on('data', (d: Buffer) => (out += d.toString()));
        child.stderr.on('data', (d: Buffer) => (out += d.toString()));
        child.once('exit', (code) => resolve({ code, out }));
      });
      expect(result.code, result.out).toBe(0);
      expect(JSON.parse(result.out)).toEqual({ proxied: 200, path: '/get', ready: 200, other: 'ECONNREFUSED' });
    });
  });
});
