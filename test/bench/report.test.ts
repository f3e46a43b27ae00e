import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compareRatios, formatComparison, machineAtStart, machineLine, ratioText, type RunResult } from './report.ts';
import type { BenchRow } from './types.ts';

const dir = mkdtempSync(join(tmpdir(), 'gw-bench-report-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function resultsFile(name: string, rows: BenchRow[]): string {
  const result: RunResult = {
    startedAt: '2026-01-01T00:00:00.000Z',
    node: 'v24.0.0',
    quick: false,
    durationMs: 1,
    machine: { cpu: 'Test CPU', cores: 2, loadBefore: [1, 1, 1], loadAfter: [2, 1, 1] },
    rows,
    failures: [],
  };
  const file = join(dir, name);
  writeFileSync(file, JSON.stringify(result));
  return file;
}

const read = (file: string): RunResult => JSON.parse(readFileSync(file, 'utf8')) as RunResult;

describe('comparing two results files', () => {
  const earlier = resultsFile('earlier.json', [
    { suite: 'proxy', name: 'bare', value: 1000, unit: 'req/s' },
    { suite: 'proxy', name: 'keyless', value: 900, unit: 'req/s', baseline: 'bare', ratio: 0.9 },
    { suite: 'proxy', name: 'auth', value: 500, unit: 'req/s', baseline: 'bare', ratio: 0.5 },
    { suite: 'proxy', name: 'gone', value: 1, unit: 'req/s', baseline: 'bare', ratio: 0.1 },
  ]);
  const current = resultsFile('current.json', [
    { suite: 'proxy', name: 'bare', value: 3000, unit: 'req/s' },
    { suite: 'proxy', name: 'keyless', value: 2700, unit: 'req/s', baseline: 'bare', ratio: 0.9 },
    { suite: 'proxy', name: 'auth', value: 2400, unit: 'req/s', baseline: 'bare', ratio: 0.8 },
    { suite: 'proxy', name: 'new', value: 1, unit: 'req/s', baseline: 'bare', ratio: 0.2 },
    { suite: 'limits', name: 'auth', value: 1, unit: 'req/s', baseline: 'x', ratio: 3 },
  ]);

  it('gives each ratio of both runs its change, whatever the absolute figures did', () => {
    const { changes } = compareRatios(read(earlier), read(current));
    expect(changes.map(({ suite, name, before, after }) => ({ suite, name, before, after }))).toEqual([
      { suite: 'proxy', name: 'keyless', before: 0.9, after: 0.9 },
      { suite: 'proxy', name: 'auth', before: 0.5, after: 0.8 },
    ]);
    expect(changes[0]!.change).toBe(0);
    expect(changes[1]!.change).toBeCloseTo(0.6, 10);
  });

  it('names the ratios only one of the runs has, matching rows by suite and name', () => {
    const { added, removed } = compareRatios(read(earlier), read(current));
    expect(added).toEqual(['proxy: new', 'limits: auth']);
    expect(removed).toEqual(['proxy: gone']);
  });

  it('prints a regression with its sign', () => {
    const text = formatComparison(compareRatios(read(current), read(earlier)));
    expect(text).toMatch(/proxy\s+auth \(vs bare\)\s+0\.80x\s+0\.50x\s+-37\.5%/);
    expect(text).toMatch(/keyless \(vs bare\)\s+0\.90x\s+0\.90x\s+\+0\.0%/);
    expect(text).toContain('only in the earlier run: proxy: new; limits: auth');
  });
});

describe("a change against each run's own rounds", () => {
  const row = (name: string, ratio: number, low: number, high: number): BenchRow => ({
    suite: 'proxy', name, value: ratio, unit: 'ratio', baseline: 'bare', ratio, spread: { low, high, rounds: 5 },
  });
  const earlier = { rows: [row('moved', 0.62, 0.58, 0.66), row('noisy', 0.62, 0.5, 0.8), { suite: 'proxy', name: 'single', value: 1, unit: 'ratio', baseline: 'bare', ratio: 0.7 }] };
  const current = { rows: [row('moved', 0.78, 0.74, 0.83), row('noisy', 0.76, 0.6, 0.9), row('single', 0.9, 0.85, 0.95)] };

  it('calls a change beyond the rounds only when each median lies outside the other run\'s rounds', () => {
    const byName = new Map(compareRatios(earlier, current).changes.map((c) => [c.name, c.beyondRounds]));
    expect(byName.get('moved')).toBe(true);
    // 0.76 lies within the earlier rounds (0.50 to 0.80): that run saw such a figure too.
    expect(byName.get('noisy')).toBe(false);
    // The earlier run kept no rounds for it: nothing to tell.
    expect(byName.get('single')).toBeNull();
  });

  it('prints yes, no, or nothing in its own column', () => {
    const text = formatComparison(compareRatios(earlier, current));
    expect(text).toMatch(/beyond both runs' rounds/);
    expect(text).toMatch(/moved \(vs bare\)\s+0\.62x\s+0\.78x\s+\+25\.8%\s+yes$/m);
    expect(text).toMatch(/noisy \(vs bare\)\s+0\.62x\s+0\.76x\s+\+22\.6%\s+no$/m);
    expect(text).toMatch(/single \(vs bare\)\s+0\.70x\s+0\.90x\s+\+28\.6%$/m);
  });

  it("prints a ratio taken over rounds with its lowest and highest round, and one measurement's alone", () => {
    expect(ratioText(row('moved', 0.78, 0.74, 0.83))).toBe('0.78x bare (rounds 0.74–0.83, 5)');
    expect(ratioText({ suite: 'proxy', name: 'x', value: 1, unit: 'req/s', baseline: 'bare', ratio: 0.5 })).toBe('0.50x bare');
    expect(ratioText({ suite: 'proxy', name: 'x', value: 1, unit: 'req/s' })).toBe('');
  });
});

describe('the machine line', () => {
  it('names the CPU, the cores and the load average before and after', () => {
    expect(machineLine(read(resultsFile('m.json', [])).machine)).toBe(
      'machine: Test CPU, 2 cores; load average before 1.00 1.00 1.00, after 2.00 1.00 1.00',
    );
  });

  it('adds how late a thread woke on the idle machine before and after, when the run measured it', () => {
    const machine = { ...read(resultsFile('w.json', [])).machine, idleWakeLateBefore: { p99: 110, max: 910 }, idleWakeLateAfter: { p99: 2_400, max: 12_050 } };
    expect(machineLine(machine)).toBe(
      'machine: Test CPU, 2 cores; load average before 1.00 1.00 1.00, after 2.00 1.00 1.00; idle wake-up lateness p99 / max before 0.11 / 0.91 ms, after 2.40 / 12.05 ms',
    );
    expect(machineLine({ ...machine, idleWakeLateAfter: undefined })).toMatch(/before 0\.11 \/ 0\.91 ms, after \?$/);
  });

  it('reads this machine at the start of a run, the load after still to come', () => {
    const machine = machineAtStart();
    expect(machine.cores).toBeGreaterThan(0);
    expect(machine.cpu.length).toBeGreaterThan(0);
    expect(machine.loadBefore).toHaveLength(3);
    expect(machineLine(machine)).toMatch(/load average before [\d.]+ [\d.]+ [\d.]+, after \?$/);
  });

  it('says so when an earlier file has none', () => {
    expect(machineLine(undefined)).toBe('machine: not recorded');
  });
});
