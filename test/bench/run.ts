/**
 * Bench runner (`npm run bench [-- NAME...] [--suites DIR] [--out FILE] [--compare FILE]
 * [--against REV]`): runs every suite module under test/bench/suites (or only those whose file
 * name contains one of the NAMEs), starting Redis and a control plane only when a suite asks
 * for them, then prints the machine and its load, a table, and with --compare each ratio's
 * change against an earlier results file, and writes the figures as JSON. --against builds
 * another revision first, whose sidecars the proxy suite measures beside this tree's
 * (revision.ts). BENCH_QUICK=1 shortens measurements.
 */
import { loadavg } from 'node:os';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { startControlPlane } from '../harness/index.ts';
import { startRedisServer } from '../harness/redis.ts';
import { meterMachine } from './load-generator.ts';
import { prepareRevision, type Revision } from './revision.ts';
import { compareRatios, formatComparison, machineAtStart, machineLine, ratioText, type IdleWakeLateness, type RunResult } from './report.ts';
import type { BenchContext, BenchRow, BenchSuite } from './types.ts';

const HERE = import.meta.dirname;
/** The suites that run `--against`'s sidecars beside this tree's (suites/proxy.ts starts them). */
const SUITES_WITH_AGAINST = ['proxy', 'tail'];
/** How long the idle machine is metered before the first suite and after the last. */
const IDLE_METER_MS = 2_000;

async function idleWakeLateness(): Promise<IdleWakeLateness> {
  const { wakeLateMicros } = await meterMachine(IDLE_METER_MS);
  return { p99: wakeLateMicros.p99, max: wakeLateMicros.max };
}

function suiteFiles(dir: string, filters: string[]): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !f.endsWith('.d.ts'))
    .filter((f) => filters.length === 0 || filters.some((n) => f.includes(n)))
    .sort()
    .map((f) => join(dir, f));
}

/** Servers start on first use and once per run; teardown stops whatever started. */
function lazyServers(): { ctx: Omit<BenchContext, 'durationMs' | 'log'>; teardown: () => Promise<void> } {
  let redis: ReturnType<typeof startRedisServer> | undefined;
  let plane: ReturnType<typeof startControlPlane> | undefined;
  return {
    ctx: {
      redisUrl: async () => (await (redis ??= startRedisServer())).url,
      kubeconfig: async () => (await (plane ??= startControlPlane())).kubeconfig,
      controlPlanePids: async () => (await (plane ??= startControlPlane())).pids(),
    },
    teardown: async () => {
      const stops = [redis?.then((r) => r.dispose()), plane?.then((p) => p.stop())];
      await Promise.allSettled(stops);
    },
  };
}

/** Fills `ratio` from the named baseline row of the same suite when the suite did not. */
function withRatios(rows: BenchRow[]): BenchRow[] {
  return rows.map((row) => {
    if (row.ratio !== undefined || !row.baseline) return row;
    const base = rows.find((r) => r.suite === row.suite && r.name === row.baseline);
    if (!base || base.value === 0) return row;
    return { ...row, ratio: row.value / base.value };
  });
}

function formatTable(rows: BenchRow[]): string {
  const header = ['suite', 'name', 'value', 'unit', 'vs baseline'];
  const body = rows.map((r) => [
    r.suite,
    r.name,
    formatValue(r.value),
    r.unit,
    ratioText(r),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i === 2 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n');
}

function formatValue(v: number): string {
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(4);
}

async function runSuite(file: string, ctx: BenchContext): Promise<BenchRow[]> {
  const mod = (await import(pathToFileURL(file).href)) as { default?: BenchSuite };
  if (typeof mod.default !== 'function') throw new Error(`${file} has no default export of type BenchSuite`);
  return mod.default(ctx);
}

/** `--against REV`, built, when a suite that measures it is selected; else why not, printed. */
async function revisionFor(rev: string, files: readonly string[]): Promise<Revision | Error> {
  if (!files.some((f) => SUITES_WITH_AGAINST.includes(basename(f, '.ts')))) {
    return new Error(`--against: only the ${SUITES_WITH_AGAINST.join(' and ')} suites measure another revision, and none of them is selected`);
  }
  try {
    const revision = await prepareRevision(rev);
    console.log(`against ${revision.label}: its sidecar bundle is built beside this tree's`);
    return revision;
  } catch (err) {
    return err as Error;
  }
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      suites: { type: 'string', default: join(HERE, 'suites') },
      out: { type: 'string', default: join(HERE, 'results', 'latest.json') },
      compare: { type: 'string' },
      against: { type: 'string' },
    },
  });
  // Read first: a missing or unreadable file should fail before minutes of measuring.
  const earlier = values.compare === undefined ? undefined : (JSON.parse(readFileSync(values.compare, 'utf8')) as Pick<RunResult, 'rows'> & Partial<RunResult>);
  const quick = process.env.BENCH_QUICK === '1';
  const files = suiteFiles(resolve(values.suites), positionals);
  if (files.length === 0) {
    console.log(`no bench suites matched in ${values.suites}`);
    return positionals.length > 0 ? 1 : 0;
  }
  // Built before measuring too: a revision that does not build fails in seconds, not after the suites.
  const against = values.against === undefined ? undefined : await revisionFor(values.against, files);
  if (against instanceof Error) {
    console.error(against.message);
    return 1;
  }
  const servers = lazyServers();
  const started = Date.now();
  const machine = machineAtStart();
  machine.idleWakeLateBefore = await idleWakeLateness();
  console.log(machineLine(machine));
  const result: RunResult = { startedAt: new Date(started).toISOString(), node: process.version, quick, durationMs: 0, machine, rows: [], failures: [] };
  if (against !== undefined) result.against = { rev: against.rev, commit: against.commit };
  try {
    for (const file of files) {
      const suite = basename(file, '.ts');
      const log = (m: string): void => void process.stderr.write(`[${suite}] ${m}\n`);
      const ctx: BenchContext = { ...servers.ctx, against, durationMs: quick ? 1_000 : 5_000, log };
      try {
        log('running');
        result.rows.push(...withRatios(await runSuite(file, ctx)));
      } catch (err) {
        result.failures.push({ suite, error: (err as Error).stack ?? String(err) });
        log(`FAILED: ${(err as Error).message}`);
      }
    }
  } finally {
    await Promise.all([servers.teardown(), against?.dispose()]);
  }
  result.durationMs = Date.now() - started;
  machine.loadAfter = loadavg();
  machine.idleWakeLateAfter = await idleWakeLateness();
  console.log(`${machineLine(machine)}\n`);
  console.log(formatTable(result.rows));
  if (earlier !== undefined) {
    console.log(`\nratios against ${values.compare} (${earlier.startedAt ?? 'start not recorded'}; ${machineLine(earlier.machine)}):`);
    console.log(formatComparison(compareRatios(earlier, result)));
  }
  mkdirSync(dirname(values.out), { recursive: true });
  writeFileSync(values.out, `${JSON.stringify(result, null, 2)}\n`);
  console.log(`\n${result.rows.length} figure(s) from ${files.length} suite(s), ${result.failures.length} failed; JSON: ${values.out}`);
  return result.failures.length > 0 ? 1 : 0;
}

process.exitCode = await main();
