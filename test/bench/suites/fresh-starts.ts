/**
 * Fresh sidecars: V8 decides early in a process's life how it treats the objects of a request,
 * and a sidecar keeps that regime for as long as it lives. So a single process measured in the
 * other suites may be a lucky or an unlucky one. This suite starts sidecars one after another,
 * as the image runs them and without the image's `--no-allocation-site-pretenuring`
 * (interleaved), and measures each one's keyless CPU per request and full collections per
 * second under a closed loop after a short warm-up: the spread between the processes, and how
 * many of them ran in the regime of about ten full collections a second that pretenuring can
 * put a sidecar with the chart's old space in (docs/benchmarks.md#fresh-starts).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { imageNodeFlags } from '../../../scripts/images/build.ts';
import { freePort } from '../../harness/ports.ts';
import { sampleValue } from '../../support/metric-sample.ts';
import { CONNECTIONS, spawnEchoUpstream, startSidecarProcess, stopChild, waitFor, withCpuPerRequest } from '../http-load.ts';
import { closedLoop } from '../load-generator.ts';
import type { BenchRow, BenchSuite } from '../types.ts';
import { benchResources } from './proxy.ts';

const SUITE = 'fresh-starts';
const quick = process.env.BENCH_QUICK === '1';
/** Processes started per variant. */
const STARTS = quick ? 3 : 6;
const WARM_MS = 2_000;
/** Full collections per second above which a process counts as in the costly regime (it runs at five to ten; a sound one under one). */
const COSTLY_MAJORS_PER_SECOND = 2;

const VARIANTS = [
  { name: 'as the image runs them', nodeFlags: imageNodeFlags('sidecar') },
  { name: "with V8's pretenuring (the image turns it off)", nodeFlags: imageNodeFlags('sidecar').filter((flag) => flag !== '--no-allocation-site-pretenuring') },
];

/** The process's count of full (mark-compact) collections, from its metrics. */
async function fullCollections(health: string): Promise<number> {
  const count = sampleValue(await (await fetch(`${health}/metrics`)).text(), 'gw_sidecar_nodejs_gc_duration_seconds_count{kind="major"}');
  if (count === undefined) throw new Error('the sidecar\'s metrics have no count of full collections');
  return count;
}

const freshStartsSuite: BenchSuite = async (ctx) => {
  const upstreamPort = await freePort();
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const echo = spawnEchoUpstream(upstreamPort);
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-fresh-'));
  try {
    await waitFor(`${upstream}/`);
    // The key is never used: only the keyless API is driven.
    await writeFile(join(dir, 'bench.yaml'), benchResources(upstream, '0'.repeat(64)));
    const measured = new Map<string, { cpu: number; majorsPerSecond: number }[]>(VARIANTS.map((v) => [v.name, []]));
    for (let start = 0; start < STARTS; start++) {
      for (const variant of VARIANTS) {
        const sidecar = await startSidecarProcess(dir, { nodeFlags: variant.nodeFlags });
        try {
          const url = `${sidecar.base}/keyless/bench`;
          await closedLoop({ url, durationMs: WARM_MS, connections: CONNECTIONS });
          const before = await fullCollections(sidecar.health);
          const result = await withCpuPerRequest({ proxy: [sidecar.child.pid!] }, () => closedLoop({ url, durationMs: ctx.durationMs, connections: CONNECTIONS }));
          const majorsPerSecond = ((await fullCollections(sidecar.health)) - before) / (ctx.durationMs / 1000);
          const cpu = result.cpuMicrosPerRequest.proxy!;
          ctx.log(`${variant.name}, start ${start + 1}: ${cpu.toFixed(1)} µs per request, ${majorsPerSecond.toFixed(1)} full collections/s`);
          measured.get(variant.name)!.push({ cpu, majorsPerSecond });
        } finally {
          await stopChild(sidecar.child);
        }
      }
    }
    const rows: BenchRow[] = [];
    const [image, baseline] = VARIANTS.map((v) => measured.get(v.name)!);
    const slowest = (runs: { cpu: number }[]): number => Math.max(...runs.map((r) => r.cpu));
    const fastest = (runs: { cpu: number }[]): number => Math.min(...runs.map((r) => r.cpu));
    for (const variant of VARIANTS) {
      const runs = measured.get(variant.name)!;
      const name = `fresh sidecars ${variant.name}`;
      rows.push(
        { suite: SUITE, name: `${name}: CPU per keyless request, slowest of ${STARTS}`, value: slowest(runs), unit: 'µs' },
        { suite: SUITE, name: `${name}: CPU per keyless request, fastest of ${STARTS}`, value: fastest(runs), unit: 'µs' },
        { suite: SUITE, name: `${name}: full collections per second, most of ${STARTS}`, value: Math.max(...runs.map((r) => r.majorsPerSecond)), unit: '/s' },
        { suite: SUITE, name: `${name}: starts at over ${COSTLY_MAJORS_PER_SECOND} full collections per second`, value: runs.filter((r) => r.majorsPerSecond > COSTLY_MAJORS_PER_SECOND).length, unit: `of ${STARTS}` },
      );
    }
    rows.push({
      suite: SUITE,
      name: 'fresh sidecars: slowest CPU per request, as the image runs them / with pretenuring',
      value: slowest(image!) / slowest(baseline!),
      unit: 'ratio',
    });
    return rows;
  } finally {
    await stopChild(echo);
    await rm(dir, { recursive: true, force: true });
  }
};

export default freshStartsSuite;
