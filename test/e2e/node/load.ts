/**
 * Steady load for the chaos tests, run inside the node's network namespace:
 *   node load.ts URL REQUESTS_PER_SECOND SECONDS
 * Every request opens its own connection, so kube-proxy spreads them over the Service's pods
 * as it would for many clients. Prints one JSON line: answers by status, requests lost (no
 * answer: refused, reset, timed out), and per-second counts, so a test can see when a fault
 * began to show and when it was over.
 */
import { request } from 'node:http';

export interface LoadReport {
  sent: number;
  answered: Record<string, number>;
  lost: number;
  lostReasons: Record<string, number>;
  /** Per second from the start: [answered 2xx, answered otherwise, lost]. */
  timeline: Array<[number, number, number]>;
}

const TIMEOUT_MS = 5_000;

function once(url: URL): Promise<{ status?: number; error?: string }> {
  return new Promise((resolve) => {
    const req = request(url, { agent: false, timeout: TIMEOUT_MS }, (res) => {
      res.resume();
      res.once('end', () => resolve({ status: res.statusCode }));
      res.once('error', (err) => resolve({ error: (err as NodeJS.ErrnoException).code ?? err.message }));
    });
    // A timeout before the connection completed is the node's network (or an accept queue full);
    // after it, the gateway held the answer.
    let connected = false;
    req.once('socket', (socket) => socket.once('connect', () => (connected = true)));
    req.once('timeout', () => req.destroy(new Error(connected ? 'timeout' : 'connect timeout')));
    req.once('error', (err) => resolve({ error: (err as NodeJS.ErrnoException).code ?? err.message }));
    req.end();
  });
}

export async function runLoad(url: string, perSecond: number, seconds: number): Promise<LoadReport> {
  const target = new URL(url);
  const report: LoadReport = { sent: 0, answered: {}, lost: 0, lostReasons: {}, timeline: [] };
  const inFlight: Promise<void>[] = [];
  const started = Date.now();
  for (let i = 0; i < perSecond * seconds; i += 1) {
    const due = started + (i * 1000) / perSecond;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const second = Math.floor((Date.now() - started) / 1000);
    report.sent += 1;
    inFlight.push(once(target).then((r) => {
      const slot = (report.timeline[second] ??= [0, 0, 0]);
      if (r.status === undefined) {
        report.lost += 1;
        report.lostReasons[r.error ?? 'unknown'] = (report.lostReasons[r.error ?? 'unknown'] ?? 0) + 1;
        slot[2] += 1;
      } else {
        report.answered[r.status] = (report.answered[r.status] ?? 0) + 1;
        slot[r.status < 300 ? 0 : 1] += 1;
      }
    }));
  }
  await Promise.all(inFlight);
  for (let s = 0; s < report.timeline.length; s += 1) report.timeline[s] ??= [0, 0, 0];
  return report;
}

if (import.meta.main) {
  const [url, perSecond, seconds] = process.argv.slice(2);
  if (!url || !perSecond || !seconds) {
    process.stderr.write('usage: load.ts URL REQUESTS_PER_SECOND SECONDS\n');
    process.exit(2);
  }
  process.stdout.write(`${JSON.stringify(await runLoad(url, Number(perSecond), Number(seconds)))}\n`);
}
