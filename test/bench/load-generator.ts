/**
 * The bench's C load generator (load-generator.c, built here with the machine's cc), in a
 * process of its own: it shares the cores with the servers it measures, so it must cost them
 * little and keep its own schedule. docs/benchmarks.md#tail says what its figures showed.
 *
 * Open loop (the tail suite): requests start on a fixed schedule (`rate` per second), whether
 * or not earlier ones have answered, and each one's latency runs from the moment it was due,
 * not from when it was sent. A closed loop (which sends the next request when one answers)
 * slows down with the server it measures and so hides its pauses; this one counts a pause
 * against every request that was due during it.
 *
 * Closed loop (the workers suite): every connection keeps one request in flight, so the server
 * runs at its maximum, at a few µs of the generator's CPU per request where a generator in Node
 * (autocannon, which the bench used before) spends about what the proxy does.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { ensureDebianPackages } from '../harness/install-debian.ts';

const run = promisify(execFile);

const SOURCE = new URL('./load-generator.c', import.meta.url).pathname;

const micros = z.number().int().nonnegative();
const percentiles = z.object({ p50: micros, p99: micros, p99_9: micros, max: micros });

/** The meter's figures (with every run, and alone from `meterMachine`). */
const wakeLatenessSchema = z.object({
  /**
   * How late a thread at the servers' priority woke from 1 ms sleeps, in µs: how long the
   * machine kept a ready process from a core meanwhile, the floor under a server's tail.
   */
  wakeLateMicros: percentiles,
  /** The meter's wake-ups (about one per ms it ran). */
  wakes: z.number().int().nonnegative(),
  /** The meter's nice value: the priority the generator was started at, as the servers were. */
  meterNice: z.number().int(),
});

export type WakeLateness = z.infer<typeof wakeLatenessSchema>;

const resultSchema = z.object({
  /** Requests that answered. */
  answered: z.number().int().nonnegative(),
  /** Open loop: the rate requests were sent at (what was asked, not what was met); closed loop: answers per second. */
  rate: z.number().nonnegative(),
  /** Percentiles of latency from the time each request was due (open) or sent (closed), in µs. */
  latencyMicros: percentiles,
  non2xx: z.number().int().nonnegative(),
  /** Requests that found the connection refused or lost, or had no answer 30 s after the last was due (or the end, closed). */
  errors: z.number().int().nonnegative(),
  /** How far behind the schedule the generator itself noticed a request was due, at worst, in µs (its own pauses); 0 closed. */
  maxSendLagMicros: micros,
  /** The generator's nice value: raised ahead of the servers it measures when the bench runs as root. */
  nice: z.number().int(),
}).extend(wakeLatenessSchema.shape);

export type LoadResult = z.infer<typeof resultSchema>;

let built: Promise<string> | undefined;

/** The generator's binary, compiled once per source text (concurrent builders each rename a whole file into place). */
function generator(): Promise<string> {
  built ??= (async () => {
    const source = await readFile(SOURCE);
    const binary = join(tmpdir(), `gw-load-generator-${createHash('sha256').update(source).digest('hex').slice(0, 16)}`);
    if (existsSync(binary)) return binary;
    await ensureDebianPackages({ step: 'install-cc', packages: ['gcc', 'libc6-dev'], provides: ['/usr/bin/cc', '/usr/include/stdio.h'] });
    const partial = `${binary}.${process.pid}`;
    await run('cc', ['-O2', '-std=c11', '-Wall', '-Wextra', '-Werror', '-pthread', '-o', partial, SOURCE]);
    await rename(partial, binary);
    return binary;
  })();
  return built;
}

interface LoadOptions {
  url: string;
  durationMs: number;
  connections: number;
  headers?: Record<string, string>;
  /** The requests take turns among this many variants: in the i-th, a header's `{i}` reads i (0 to n-1). */
  rotate?: number;
}

async function generate(rate: string, { url, durationMs, connections, headers = {}, rotate }: LoadOptions): Promise<LoadResult> {
  const args = [...(rotate === undefined ? [] : ['--rotate', String(rotate)]), url, rate, String(durationMs), String(connections), ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)];
  // The generator gives up on answers 30 s after the last request was due; this only stops a generator that hangs.
  const { stdout } = await run(await generator(), args, { timeout: durationMs + 60_000 });
  return resultSchema.parse(JSON.parse(stdout));
}

/** `rate` requests per second for `durationMs`, on schedule. */
export function openLoop(options: LoadOptions & { rate: number }): Promise<LoadResult> {
  return generate(String(options.rate), options);
}

/** As many requests as the server answers for `durationMs`, one in flight per connection. */
export function closedLoop(options: LoadOptions): Promise<LoadResult> {
  return generate('closed', options);
}

/** The meter alone for `durationMs`, nothing sent: how steady the machine itself is (the bench's runner reads it before and after). */
export async function meterMachine(durationMs: number): Promise<WakeLateness> {
  const { stdout } = await run(await generator(), ['meter', String(durationMs)], { timeout: durationMs + 30_000 });
  return wakeLatenessSchema.parse(JSON.parse(stdout));
}
