import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readdir, readFile } from 'node:fs/promises';
import { getPriority } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { closedLoop, meterMachine, openLoop } from './load-generator.ts';

/** A loopback server whose `answer` decides each request's status; returns its base URL. */
async function serve(
  answer: (count: number, path: string) => number,
  reply: (req: IncomingMessage, res: ServerResponse) => void = (_, res) => res.end('ok'),
): Promise<{ url: string; server: Server; count: () => number }> {
  let count = 0;
  const server = createServer((req, res) => {
    count += 1;
    res.statusCode = answer(count, req.url ?? '');
    reply(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, count: () => count };
}

/** The pid of the generator process sending to `url` (its first argument), once it has started. */
async function generatorPid(url: string): Promise<number> {
  for (let attempt = 0; attempt < 400; attempt++) {
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const argv = await readFile(`/proc/${entry}/cmdline`, 'utf8').then((text) => text.split('\0'), (): string[] => []);
      if (argv[0]?.includes('gw-load-generator') && argv.includes(url)) return Number(entry);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`no load generator sending to ${url}`);
}

describe('bench: the load generator', () => {
  let server: Server | undefined;
  afterEach(async () => {
    const open = server;
    server = undefined;
    if (open) await new Promise((resolve) => open.close(resolve));
  });

  it('sends rate × duration requests on schedule and counts every answer and non-2xx', async () => {
    const target = await serve((_, path) => (path === '/fail' ? 503 : 200));
    server = target.server;
    const ok = await openLoop({ url: `${target.url}/ok`, rate: 500, durationMs: 400, connections: 4 });
    expect(ok).toMatchObject({ answered: 200, rate: 500, non2xx: 0, errors: 0 });
    expect(target.count()).toBe(200);
    expect(ok.latencyMicros.p50).toBeGreaterThan(0);
    expect(ok.latencyMicros.p50).toBeLessThanOrEqual(ok.latencyMicros.p99);
    expect(ok.latencyMicros.p99).toBeLessThanOrEqual(ok.latencyMicros.max);
    // Run as root, the generator puts itself ahead of the servers it measures; otherwise it keeps the priority it was given.
    expect(ok.nice).toBe(process.getuid?.() === 0 ? -10 : getPriority());
    const failing = await openLoop({ url: `${target.url}/fail`, rate: 500, durationMs: 100, connections: 4 });
    expect(failing).toMatchObject({ answered: 50, non2xx: 50, errors: 0 });
  });

  it('charges a server pause to every request due during it, not only to the one it held', async () => {
    // The 50th request stalls the process for 100 ms; at 1,000 req/s about 100 more are due
    // meanwhile. A closed loop would wait and record one slow request per connection.
    const target = await serve((count) => {
      if (count === 50) {
        const until = performance.now() + 100;
        while (performance.now() < until) {
          // a synchronous pause, as a long GC or a blocking call would make
        }
      }
      return 200;
    });
    server = target.server;
    const result = await openLoop({ url: target.url, rate: 1000, durationMs: 300, connections: 2 });
    expect(result.answered).toBe(300);
    expect(result.latencyMicros.max).toBeGreaterThanOrEqual(90_000);
    // About a third of the requests were due during the pause: the 99th percentile shows it.
    expect(result.latencyMicros.p99).toBeGreaterThanOrEqual(50_000);
    // The generator runs in a process of its own: the server's pause is not its own, nor the
    // machine's. The meter runs at the servers' priority, so a busy machine may hold one of its
    // wakes back (as the next case shows); the schedule starts again from it, so its p99 stays clear.
    expect(result.maxSendLagMicros).toBeLessThan(50_000);
    expect(result.wakeLateMicros.p99).toBeLessThan(50_000);
  });

  it('meters how late a thread at the servers\' priority wakes: a pause of the machine shows once, not as a run of late wakes', async () => {
    const target = await serve(() => 200);
    server = target.server;
    const url = `${target.url}/meter`;
    // Long enough that a loaded machine's slow search of /proc still finds the generator running.
    const running = openLoop({ url, rate: 500, durationMs: 1_500, connections: 2 });
    // Stopping the generator's process is what a host that does not run a virtual CPU does to everything on it.
    const pid = await generatorPid(url);
    await new Promise((resolve) => setTimeout(resolve, 100));
    process.kill(pid, 'SIGSTOP');
    await new Promise((resolve) => setTimeout(resolve, 150));
    process.kill(pid, 'SIGCONT');
    const result = await running;
    expect(result).toMatchObject({ answered: 750, errors: 0 });
    expect(result.wakeLateMicros.max).toBeGreaterThanOrEqual(140_000);
    // One wake-up was late by the pause; the schedule starts again from it, so the 99th percentile stays clear of it.
    expect(result.wakeLateMicros.p99).toBeLessThan(50_000);
    expect(result.wakeLateMicros.p50).toBeLessThanOrEqual(result.wakeLateMicros.p99);
    // About one wake per ms the meter was not stopped.
    expect(result.wakes).toBeGreaterThanOrEqual(400);
    expect(result.wakes).toBeLessThanOrEqual(1_550);
    // The meter keeps the priority the generator was started at (the servers'), whatever the generator raised its own to.
    expect(result.meterNice).toBe(getPriority());
  });

  it('meters the machine alone, sending nothing, one wake-up per ms at the priority it was started at', async () => {
    const result = await meterMachine(300);
    expect(result.wakes).toBe(300);
    expect(result.wakeLateMicros.p50).toBeLessThanOrEqual(result.wakeLateMicros.p99);
    expect(result.wakeLateMicros.p99).toBeLessThanOrEqual(result.wakeLateMicros.max);
    expect(result.meterNice).toBe(getPriority());
  });

  it('counts a refused connection as an error, not an answer', async () => {
    const target = await serve(() => 200);
    await new Promise((resolve) => target.server.close(resolve));
    const result = await openLoop({ url: target.url, rate: 200, durationMs: 50, connections: 1 });
    expect(result).toMatchObject({ answered: 0, errors: 10 });
  });

  it('reads chunked answers, sends the given headers, and opens a connection the server closed again', async () => {
    // Two writes make a chunked body; every answer closes its connection.
    const target = await serve(
      (_, path) => (path === '/bench' ? 200 : 404),
      (req, res) => {
        if (req.headers.authorization !== 'secret') res.statusCode = 401;
        res.setHeader('connection', 'close');
        res.write('first part, ');
        res.end('second part');
      },
    );
    server = target.server;
    const result = await openLoop({ url: `${target.url}/bench`, rate: 400, durationMs: 250, connections: 3, headers: { authorization: 'secret' } });
    expect(result).toMatchObject({ answered: 100, non2xx: 0, errors: 0 });
    expect(target.count()).toBe(100);
    const unauthorized = await openLoop({ url: `${target.url}/bench`, rate: 400, durationMs: 50, connections: 3 });
    expect(unauthorized).toMatchObject({ answered: 20, non2xx: 20, errors: 0 });
  });

  it('takes turns among the variants of --rotate, each header\'s {i} read as the variant\'s number', async () => {
    const seen: string[] = [];
    const target = await serve(() => 200, (req, res) => {
      seen.push(`${String(req.headers.authorization)} ${String(req.headers['x-plain'])}`);
      res.end('ok');
    });
    server = target.server;
    const result = await openLoop({ url: `${target.url}/bench`, rate: 1_000, durationMs: 30, connections: 1, headers: { authorization: 'key-{i}-of-{i}', 'x-plain': 'same' }, rotate: 12 });
    expect(result).toMatchObject({ answered: 30, non2xx: 0, errors: 0 });
    // One connection sends in turn, so the server sees the variants in order, round and round.
    expect(seen).toEqual(Array.from({ length: 30 }, (_, n) => `key-${n % 12}-of-${n % 12} same`));
  });

  it('closed loop: keeps one request in flight per connection for the duration, and reports the rate met', async () => {
    // Each answer takes 10 ms: 4 connections for 300 ms make about 4 × 30 requests.
    let inFlight = 0;
    let mostInFlight = 0;
    const target = await serve(
      () => 200,
      (_, res) => {
        inFlight += 1;
        mostInFlight = Math.max(mostInFlight, inFlight);
        setTimeout(() => {
          inFlight -= 1;
          res.end('ok');
        }, 10);
      },
    );
    server = target.server;
    const result = await closedLoop({ url: target.url, durationMs: 300, connections: 4 });
    expect(result).toMatchObject({ non2xx: 0, errors: 0, maxSendLagMicros: 0 });
    expect(result.answered).toBe(target.count());
    expect(result.answered).toBeGreaterThanOrEqual(80);
    expect(result.answered).toBeLessThanOrEqual(124);
    expect(mostInFlight).toBe(4);
    expect(result.rate).toBeGreaterThan(250);
    expect(result.rate).toBeLessThanOrEqual(400);
    expect(result.latencyMicros.p50).toBeGreaterThanOrEqual(10_000);
  });

  it('closed loop: a refused connection is an error, tried again at a bounded pace until the end', async () => {
    const target = await serve(() => 200);
    await new Promise((resolve) => target.server.close(resolve));
    const started = performance.now();
    const result = await closedLoop({ url: target.url, durationMs: 300, connections: 2 });
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(result.answered).toBe(0);
    expect(result.errors).toBeGreaterThan(0);
    // Two connections tried again each time the loop wakes (at least every 100 ms), not in a spin.
    expect(result.errors).toBeLessThan(100);
  });
});
