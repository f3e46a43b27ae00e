import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sessionDir } from '../../harness/procs.ts';

const SCRIPT = join(import.meta.dirname, '..', '..', 'harness', 'build-bins.sh');

function buildBins(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', [SCRIPT, ...args], { env: { ...process.env, ...env }, timeout: 600_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('build-bins.sh', () => {
  it('names the failed step and its log, and leaves no binary', async () => {
    const dir = join(sessionDir(), 'bins-fail');
    const out = await buildBins(['etcd'], { GW_TEST_BINS_DIR: dir, GW_GO: '/nonexistent/go' });
    expect(out.code).toBe(1);
    const log = /step 'find-go' failed; log: (\S+)/.exec(out.stderr)?.[1];
    expect(log).toBe(join(dir, 'etcd-v3.5.16', 'build.log'));
    expect(readFileSync(log!, 'utf8')).toContain('go not found');
    expect(existsSync(join(dir, 'etcd-v3.5.16', 'etcd'))).toBe(false);
  });

  it('rejects an unknown component', async () => {
    const out = await buildBins(['kubectl'], { GW_TEST_BINS_DIR: join(sessionDir(), 'bins-unknown') });
    expect(out.code).toBe(2);
    expect(out.stderr).toContain("unknown component 'kubectl'");
  });

  it('builds once when two runs ask for the same binary at the same time', { timeout: 600_000 }, async () => {
    // A fresh cache folder; Go's own build cache (warm after the global setup) keeps it short.
    const dir = join(sessionDir(), 'bins-race');
    const [a, b] = await Promise.all([buildBins(['etcd'], { GW_TEST_BINS_DIR: dir }), buildBins(['etcd'], { GW_TEST_BINS_DIR: dir })]);
    expect([a.code, b.code]).toEqual([0, 0]);
    const bin = join(dir, 'etcd-v3.5.16', 'etcd');
    expect(a.stdout.trim()).toBe(`etcd=${bin}`);
    expect(b.stdout.trim()).toBe(`etcd=${bin}`);
    const builds = [a, b].filter((r) => r.stderr.includes('building etcd v3.5.16'));
    expect(builds).toHaveLength(1);
    const version = await new Promise<string>((resolve) => {
      const child = spawn(bin, ['--version']);
      let s = '';
      child.stdout.on('data', (d: Buffer) => (s += d.toString()));
      child.once('close', () => resolve(s));
    });
    expect(version).toContain('etcd Version: 3.5.16');
  });
});
