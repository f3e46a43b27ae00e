/**
 * What a bench run records besides its rows, and how two runs are compared. Absolute
 * figures belong to one machine at one load, so a run names both; across runs only the
 * ratios (each taken side by side within its own run) are compared.
 */
import { availableParallelism, cpus, loadavg } from 'node:os';
import type { BenchRow, RoundSpread } from './types.ts';

export interface Machine {
  cpu: string;
  cores: number;
  /** 1, 5 and 15 minute load averages when the run started and when it ended. */
  loadBefore: number[];
  loadAfter: number[];
  /**
   * How late a thread woke from 1 ms sleeps on the idle machine, in µs, for 2 s before the first
   * suite and after the last (test/bench/load-generator.ts): a virtual machine whose host is busy
   * shows it here before it shows in the rows. Absent from files of earlier runs.
   */
  idleWakeLateBefore?: IdleWakeLateness;
  idleWakeLateAfter?: IdleWakeLateness;
}

/** The idle meter's figures a run keeps, in µs. */
export interface IdleWakeLateness {
  p99: number;
  max: number;
}

export interface RunResult {
  startedAt: string;
  node: string;
  quick: boolean;
  durationMs: number;
  machine: Machine;
  /** `--against REV`: the revision measured beside this tree, and the commit it named. */
  against?: { rev: string; commit: string };
  rows: BenchRow[];
  failures: { suite: string; error: string }[];
}

export function machineAtStart(): Machine {
  return { cpu: cpus()[0]?.model.trim() ?? 'unknown', cores: availableParallelism(), loadBefore: loadavg(), loadAfter: [] };
}

export function machineLine(machine: Machine | undefined): string {
  if (machine === undefined) return 'machine: not recorded';
  const load = (l: number[]): string => (l.length === 0 ? '?' : l.map((n) => n.toFixed(2)).join(' '));
  const idle = (w: IdleWakeLateness | undefined): string => (w === undefined ? '?' : `${(w.p99 / 1000).toFixed(2)} / ${(w.max / 1000).toFixed(2)} ms`);
  const line = `machine: ${machine.cpu}, ${machine.cores} cores; load average before ${load(machine.loadBefore)}, after ${load(machine.loadAfter)}`;
  if (machine.idleWakeLateBefore === undefined) return line;
  return `${line}; idle wake-up lateness p99 / max before ${idle(machine.idleWakeLateBefore)}, after ${idle(machine.idleWakeLateAfter)}`;
}

export interface RatioChange {
  suite: string;
  name: string;
  baseline: string;
  before: number;
  after: number;
  /** after / before - 1: -0.10 is a ratio 10% lower than before. */
  change: number;
  /**
   * Whether each run's median lies outside the other run's rounds (lowest to highest): a change
   * larger than what either run's own rounds disagree by. Null when a run kept no spread (a
   * ratio of one measurement, or a file from before spreads were kept).
   */
  beyondRounds: boolean | null;
}

export interface Comparison {
  changes: RatioChange[];
  /** Ratios of the current run the earlier one lacks, and the other way round ("suite: name"). */
  added: string[];
  removed: string[];
}

const ratioRows = (rows: readonly BenchRow[]): Map<string, BenchRow> =>
  new Map(rows.filter((r) => r.ratio !== undefined).map((r) => [`${r.suite}: ${r.name}`, r]));

const within = (value: number, spread: RoundSpread): boolean => value >= spread.low && value <= spread.high;

/** Every ratio of `current` against the same row's ratio in `earlier`. */
export function compareRatios(earlier: Pick<RunResult, 'rows'>, current: Pick<RunResult, 'rows'>): Comparison {
  const before = ratioRows(earlier.rows);
  const after = ratioRows(current.rows);
  const changes: RatioChange[] = [];
  for (const [id, row] of after) {
    const old = before.get(id);
    if (old === undefined || old.ratio === undefined || row.ratio === undefined) continue;
    const change = old.ratio === 0 ? 0 : row.ratio / old.ratio - 1;
    const beyondRounds = old.spread === undefined || row.spread === undefined ? null : !within(row.ratio, old.spread) && !within(old.ratio, row.spread);
    changes.push({ suite: row.suite, name: row.name, baseline: row.baseline ?? '', before: old.ratio, after: row.ratio, change, beyondRounds });
  }
  return {
    changes,
    added: [...after.keys()].filter((id) => !before.has(id)),
    removed: [...before.keys()].filter((id) => !after.has(id)),
  };
}

export function formatComparison(comparison: Comparison): string {
  const header = ['suite', 'name', 'ratio before', 'ratio now', 'change', "beyond both runs' rounds"];
  const body = comparison.changes.map((c) => [
    c.suite,
    `${c.name} (vs ${c.baseline})`,
    `${c.before.toFixed(2)}x`,
    `${c.after.toFixed(2)}x`,
    `${c.change >= 0 ? '+' : ''}${(c.change * 100).toFixed(1)}%`,
    c.beyondRounds === null ? '' : c.beyondRounds ? 'yes' : 'no',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i >= 2 && i <= 4 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ').trimEnd();
  const lines = [line(header), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)];
  if (comparison.added.length > 0) lines.push(`only in this run: ${comparison.added.join('; ')}`);
  if (comparison.removed.length > 0) lines.push(`only in the earlier run: ${comparison.removed.join('; ')}`);
  return lines.join('\n');
}

/** A row's ratio as the table prints it: with its rounds' lowest and highest when it was taken over rounds. */
export function ratioText(row: BenchRow): string {
  if (row.ratio === undefined) return '';
  const text = `${row.ratio.toFixed(2)}x ${row.baseline ?? ''}`.trim();
  const spread = row.spread;
  if (spread === undefined || spread.rounds < 2) return text;
  return `${text} (rounds ${spread.low.toFixed(2)}–${spread.high.toFixed(2)}, ${spread.rounds})`;
}
