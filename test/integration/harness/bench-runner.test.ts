import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { BenchRow } from '../../bench/types.ts';

const REPO = join(import.meta.dirname, '..', '..', '..');
const NODE = join(REPO, 'node_modules', '.bin', 'node');
const SUITES = join(import.meta.dirname, 'fixtures', 'bench-suites');

function runBench(args: string[], runRoot: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(NODE, [join(REPO, 'test/bench/run.ts'), '--suites', SUITES, ...args], {
      env: { ...process.env, BENCH_QUICK: '1', GW_TEST_RUN_ROOT: runRoot },
      timeout: 60_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('bench runner', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-test-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('runs a suite on a Redis it starts, prints the table, writes JSON and stops the Redis', async () => {
    const out = join(dir, 'ping.json');
    const runRoot = join(dir, 'runs-ok');
    const res = await runBench(['ping', '--out', out], runRoot);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^suite\s+name\s+value\s+unit\s+vs baseline$/m);
    expect(res.stdout).toMatch(/^redis-ping\s+pipelined-16\s+\d+\s+ops\/s\s+\d+\.\d\dx serial$/m);
    const json = JSON.parse(readFileSync(out, 'utf8')) as { rows: BenchRow[]; failures: unknown[]; quick: boolean };
    expect(json.quick).toBe(true);
    expect(json.failures).toEqual([]);
    expect(json.rows.map((r) => r.name)).toEqual(['serial', 'pipelined-16']);
    const [serial, piped] = json.rows as [BenchRow, BenchRow];
    expect(serial.value).toBeGreaterThan(0);
    expect(piped.ratio).toBeCloseTo(piped.value / serial.value, 6);
    // The runner's session folder (with the Redis pid file) is gone once it exits.
    expect(existsSync(runRoot) ? readdirSync(runRoot) : []).toEqual([]);
  });

  it('reports a failing suite and exits non-zero', async () => {
    const out = join(dir, 'broken.json');
    const res = await runBench(['broken', '--out', out], join(dir, 'runs-broken'));
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('[broken] FAILED: broken suite');
    const json = JSON.parse(readFileSync(out, 'utf8')) as { rows: BenchRow[]; failures: { suite: string }[] };
    expect(json.rows).toEqual([]);
    expect(json.failures.map((f) => f.suite)).toEqual(['broken']);
  });

  it('fails when no suite matches the names asked for', async () => {
    const res = await runBench(['no-such-suite', '--out', join(dir, 'none.json')], join(dir, 'runs-none'));
    expect(res.code).toBe(1);
    expect(res.stdout).toContain('no bench suites matched');
  });
});
