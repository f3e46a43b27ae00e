/**
 * An open-loop load generator: requests start on a fixed schedule (`rate` per second),
 * whether or not earlier ones have answered, and each one's latency runs from the moment it
 * was due, not from when it was sent. A closed loop (autocannon's, which sends the next
 * request when one answers) slows down with the server it measures and so hides its pauses;
 * this one counts a pause against every request that was due during it. Latencies are kept
 * in nanoseconds, so sub-millisecond percentiles are not rounded to whole milliseconds.
 */
import { createHistogram } from 'node:perf_hooks';
import { Pool } from 'undici';

export interface OpenLoopResult {
  /** Requests that answered, and the rate they were sent at (what was asked, not what was met). */
  answered: number;
  rate: number;
  /** Percentiles of latency from the time each request was due, in µs. */
  latencyMicros: { p50: number; p99: number; p99_9: number; max: number };
  non2xx: number;
  errors: number;
  /** How far behind the schedule the generator itself fell at worst (its own pauses), in µs. */
  maxSendLagMicros: number;
}

/** How often the generator wakes to send what is due; requests due between two wakes start together. */
const TICK_MS = 1;

export async function openLoop(options: { url: string; rate: number; durationMs: number; connections: number; headers?: Record<string, string> }): Promise<OpenLoopResult> {
  const { rate, durationMs, connections, headers } = options;
  const url = new URL(options.url);
  const pool = new Pool(url.origin, { connections, pipelining: 1 });
  const path = url.pathname + url.search;
  const latency = createHistogram();
  const total = Math.round((rate * durationMs) / 1000);
  let sent = 0;
  let settled = 0;
  let non2xx = 0;
  let errors = 0;
  let maxSendLag = 0n;
  const start = process.hrtime.bigint();
  const dueAt = (i: number): bigint => start + BigInt(Math.round((i * 1e9) / rate));

  const send = (due: bigint): Promise<void> =>
    pool.request({ method: 'GET', path, headers }).then(
      async (res) => {
        await res.body.dump();
        latency.record(Number(process.hrtime.bigint() - due) || 1);
        if (res.statusCode < 200 || res.statusCode > 299) non2xx += 1;
      },
      () => {
        errors += 1;
      },
    );

  // Counted, not collected: tens of thousands of pending promises in an array would be the
  // generator's own garbage, and its GC pauses would land on the server's figures.
  let allSent = false;
  let done = (): void => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  const settle = (): void => {
    settled += 1;
    if (allSent && settled === sent) done();
  };
  const tick = (): void => {
    const now = process.hrtime.bigint();
    while (sent < total && dueAt(sent) <= now) {
      const due = dueAt(sent);
      if (now - due > maxSendLag) maxSendLag = now - due;
      void send(due).then(settle);
      sent += 1;
    }
    if (sent < total) {
      setTimeout(tick, TICK_MS);
      return;
    }
    allSent = true;
    if (settled === sent) done();
  };
  tick();
  await finished;
  await pool.close();
  const micros = (ns: number): number => Math.round(ns / 1000);
  return {
    answered: settled - errors,
    rate,
    latencyMicros: { p50: micros(latency.percentile(50)), p99: micros(latency.percentile(99)), p99_9: micros(latency.percentile(99.9)), max: micros(latency.max) },
    non2xx,
    errors,
    maxSendLagMicros: micros(Number(maxSendLag)),
  };
}
