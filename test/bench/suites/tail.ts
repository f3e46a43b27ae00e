/**
 * Steady tail (issue 13): each proxy row at half of its own maximum throughput, driven open
 * loop (test/bench/load-generator.ts), so a pause in the server shows in the percentiles of
 * every request due during it. The maximum is the closed-loop req/s of the proxy suite's
 * measurement, with as many connections as here; the latency rows are in µs, medians over
 * interleaved rounds.
 * What the issue asks of the sidecar rows: p99 at most 3× p50, and at most 5 ms over the
 * bare forwarder's p99 in the same round; the auth-token row is also given against the Redis
 * floor's p99, the round trip its limit cannot do without. Each row also gives the proxy's
 * CPU per request under this load and the share of a core that makes: requests that arrive
 * one at a time cost more than the batches of a closed loop, so half its maximum is not half
 * a core.
 * Beside each row, how late a thread at the servers' priority woke from 1 ms sleeps during it
 * (the generator's meter): the wait for a core the machine imposed on any process meanwhile,
 * which no server's p99 can be under. Over the row's p50 it is the smallest p99 / p50 the row
 * could have shown on this machine at this load.
 */
import { CONNECTIONS, httpRounds, median, measureRounds, roundOrder, twinsOf, withCpuPerRequest, type Target, type WithCpu } from '../http-load.ts';
import { openLoop, type LoadResult } from '../load-generator.ts';
import type { BenchRow, BenchSuite } from '../types.ts';
import { BARE, limitedInRedis, REDIS_FLOOR, startProxyTargets } from './proxy.ts';

const SUITE = 'tail';

/** One open-loop run of a target, with what each request cost the proxy's process. */
type TailRun = WithCpu<LoadResult>;
/** The share of each row's maximum it is driven at: the half, or BENCH_TAIL_LOAD (0 to 1) to see how the tail moves with load. */
const LOAD = ((): number => {
  const share = Number(process.env.BENCH_TAIL_LOAD);
  return share > 0 && share <= 1 ? share : 0.5;
})();

/** The median over rounds of a row's p99 less its baseline's in the same round, in ms. */
const p99Added = (own: readonly TailRun[], baseline: readonly TailRun[]): number =>
  median(own.map((r, i) => (r.latencyMicros.p99 - baseline[i]!.latencyMicros.p99) / 1000));

const tailSuite: BenchSuite = async (ctx) => {
  const { targets: all, stop } = await startProxyTargets(ctx, ['undici']);
  try {
    const targets = all.filter((t) => t.name !== 'upstream direct');
    const closed = await measureRounds(ctx, targets, 1);
    const rateOf = (t: Target): number => Math.round(closed.get(t.name)![0]!.rate * LOAD);
    const runs = new Map<string, TailRun[]>(targets.map((t) => [t.name, []]));
    for (let round = 0; round < httpRounds(ctx); round += 1) {
      for (const target of roundOrder(targets, round)) {
        const proxy = { proxy: target.cpu?.proxy ?? [] };
        const result = await withCpuPerRequest(proxy, () =>
          openLoop({ url: target.url, headers: target.headers, rate: rateOf(target), durationMs: ctx.durationMs, connections: CONNECTIONS }),
        );
        const proxyCpuMicros = result.cpuMicrosPerRequest.proxy!;
        const { p50, p99, p99_9, max } = result.latencyMicros;
        const late = result.wakeLateMicros;
        ctx.log(`${target.name} at ${result.rate} req/s: p50 ${p50} µs, p99 ${p99} µs, p99.9 ${p99_9} µs, max ${max} µs; proxy CPU ${proxyCpuMicros.toFixed(0)} µs per request; generator lag at worst ${result.maxSendLagMicros} µs (nice ${result.nice}); the machine's wake-up lateness p50 ${late.p50} µs, p99 ${late.p99} µs, max ${late.max} µs (nice ${result.meterNice})`);
        if (result.non2xx > 0 || result.errors > 0) throw new Error(`${target.name}: ${result.non2xx} non-2xx and ${result.errors} errors`);
        runs.get(target.name)!.push(result);
      }
    }
    const bare = runs.get(BARE)!;
    const floor = runs.get(REDIS_FLOOR)!;
    const rows: BenchRow[] = [];
    for (const target of targets) {
      const own = runs.get(target.name)!;
      const at = (pick: (r: TailRun) => number): number => median(own.map(pick));
      const name = `${target.name} at ${LOAD} of its maximum`;
      rows.push(
        { suite: SUITE, name: `${name}: rate`, value: own[0]!.rate, unit: 'req/s' },
        { suite: SUITE, name: `${name}: p50`, value: at((r) => r.latencyMicros.p50), unit: 'µs' },
        { suite: SUITE, name: `${name}: p99`, value: at((r) => r.latencyMicros.p99), unit: 'µs' },
        { suite: SUITE, name: `${name}: p99.9`, value: at((r) => r.latencyMicros.p99_9), unit: 'µs' },
        { suite: SUITE, name: `${name}: p99 / p50`, value: at((r) => r.latencyMicros.p99 / r.latencyMicros.p50), unit: 'ratio' },
        { suite: SUITE, name: `${name}: CPU per request: proxy`, value: at((r) => r.cpuMicrosPerRequest.proxy!), unit: 'µs' },
        { suite: SUITE, name: `${name}: proxy's share of a core`, value: at((r) => (r.cpuMicrosPerRequest.proxy! * r.rate) / 1e6), unit: 'ratio' },
        { suite: SUITE, name: `${name}: the machine's wake-up lateness meanwhile, p99`, value: at((r) => r.wakeLateMicros.p99), unit: 'µs' },
        { suite: SUITE, name: `${name}: the machine's wake-up lateness meanwhile, p99.9`, value: at((r) => r.wakeLateMicros.p99_9), unit: 'µs' },
        { suite: SUITE, name: `${name}: the machine's p99 wake-up lateness / the row's p50`, value: at((r) => r.wakeLateMicros.p99 / r.latencyMicros.p50), unit: 'ratio' },
      );
      if (target.name !== BARE) rows.push({ suite: SUITE, name: `${name}: p99 added over the bare forwarder's`, value: p99Added(own, bare), unit: 'ms' });
      if (limitedInRedis(target)) rows.push({ suite: SUITE, name: `${name}: p99 added over the Redis floor's`, value: p99Added(own, floor), unit: 'ms' });
    }
    // --against: what this tree's build adds to each row's p99 over the other revision's, in the same rounds.
    for (const [target, twin] of twinsOf(targets)) {
      rows.push({ suite: SUITE, name: `${target.name} at ${LOAD} of its maximum: p99 added over ${twin}'s`, value: p99Added(runs.get(target.name)!, runs.get(twin)!), unit: 'ms' });
    }
    return rows;
  } finally {
    await stop();
  }
};

export default tailSuite;
