/**
 * Routes at scale: the same keyless request through a sidecar serving 10 APIs and one
 * serving 5,000 (as the admin gateway does with GW_APIS=*), req/s side by side in
 * interleaved rounds; and the route lookup alone, in process, on tables of both sizes.
 * With the listen paths indexed both ratios stay near 1; a scan over every API would not.
 * Then the tail of the 5,000-API sidecar while its folder keeps changing: open-loop requests
 * at a steady rate, quiet and while a new Key file lands every 400 ms (each reloads the
 * folder, as a Key the admin operations create does), in interleaved rounds. A reload that
 * compiled and routed every API again held the event loop for tens of milliseconds.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RouteTable } from '../../../sidecar/gateway/routes.ts';
import { api } from '../../support/compiled-fixtures.ts';
import { freePort } from '../../harness/ports.ts';
import { measureRounds, median, overRounds, roundCount, rowsOf, spawnEchoUpstream, startSidecarProcess, stopChild, waitFor, type Target } from '../http-load.ts';
import { openLoop, type LoadResult } from '../load-generator.ts';
import type { BenchContext, BenchRow, BenchSuite } from '../types.ts';

const SUITE = 'routes';
const SIZES = [10, 5_000] as const;
/** The API every request goes to: present in both tables, neither first nor last. */
const TARGET = 7;

const listenPath = (i: number): string => `/team-${String(i).padStart(4, '0')}/svc/`;

function apiDefinitions(count: number, upstream: string): string {
  const docs: string[] = [];
  for (let i = 0; i < count; i++) {
    docs.push(`apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: api-${i} }
spec: { api_id: api-${i}, name: api ${i}, use_keyless: true, proxy: { listen_path: '${listenPath(i)}', target_url: '${upstream}' } }
`);
  }
  return docs.join('---\n');
}

/** Lookups per second of RouteTable.match on a table of `count` APIs, over a few request paths. */
function lookupsPerSecond(count: number, durationMs: number): number {
  const table = new RouteTable(Array.from({ length: count }, (_, i) => api(`api-${i}`, { keyless: true, listen_path: listenPath(i) })));
  const urls = [`${listenPath(TARGET)}orders/42?x=1`, `${listenPath(TARGET)}a/b/c`, '/nowhere/at/all', listenPath(SIZES[0] - 1)];
  let lookups = 0;
  const started = performance.now();
  while (performance.now() - started < durationMs) {
    for (let i = 0; i < 10_000; i++) table.match(urls[i % urls.length]!);
    lookups += 10_000;
  }
  return lookups / ((performance.now() - started) / 1000);
}

function lookupRows(ctx: BenchContext): BenchRow[] {
  const name = (count: number): string => `route lookup, ${count.toLocaleString('en')} APIs`;
  // Short interleaved rounds, medians kept, as for the HTTP figures.
  const rounds = 5;
  const all = new Map<number, number[]>(SIZES.map((count) => [count, []]));
  for (let round = 0; round < rounds; round++) {
    for (const count of SIZES) all.get(count)!.push(lookupsPerSecond(count, ctx.durationMs / rounds));
  }
  const first = all.get(SIZES[0]!)!;
  return SIZES.map((count) => ({
    suite: SUITE,
    name: name(count),
    value: Math.round(median(all.get(count)!)),
    unit: 'lookups/s',
    ...(count === SIZES[0] ? {} : { baseline: name(SIZES[0]!), ...overRounds(all.get(count)!.map((v, i) => v / first[i]!)) }),
  }));
}

/** The open loop's rate for the reload rows: well under what one core serves, so only pauses show in the tail. */
const RELOAD_ROWS_RATE = 300;
const KEY_EVERY_MS = 400;

const keyFile = (n: number, apiId: string): string => `apiVersion: gw.dev/v1alpha1
kind: Key
metadata: { name: bench-key-${n} }
spec:
  key_hash: ${createHash('sha256').update(`bench-key-${n}`).digest('hex')}
  rate: 100
  per: 60
  access_rights: { ${apiId}: { api_id: ${apiId}, api_name: ${apiId} } }
`;

/** Open-loop requests to `url`, quiet and while Key files land in `dir`, in interleaved rounds: p99 and p99.9 of each. */
async function reloadRows(ctx: BenchContext, url: string, dir: string): Promise<BenchRow[]> {
  const runs = { quiet: [] as LoadResult[], reloading: [] as LoadResult[] };
  let written = 0;
  const load = (): Promise<LoadResult> => openLoop({ url, rate: RELOAD_ROWS_RATE, durationMs: ctx.durationMs, connections: 8 });
  for (let round = 0; round < roundCount(3); round++) {
    runs.quiet.push(await load());
    let writing = true;
    const writer = (async () => {
      while (writing) {
        await writeFile(join(dir, `bench-key-${written}.yaml`), keyFile(written, `api-${TARGET}`));
        written += 1;
        await sleep(KEY_EVERY_MS);
      }
    })();
    runs.reloading.push(await load());
    writing = false;
    await writer;
  }
  ctx.log(`${written} Key files written while reloading`);
  const name = (phase: keyof typeof runs, percentile: string): string =>
    `one of 5,000 APIs at ${RELOAD_ROWS_RATE} req/s, ${phase === 'quiet' ? 'folder unchanged' : `a Key file every ${KEY_EVERY_MS} ms`}: ${percentile}`;
  return (['p99', 'p99_9'] as const).flatMap((percentile) => {
    const label = percentile.replace('_', '.');
    const ms = (phase: keyof typeof runs): number => median(runs[phase].map((r) => r.latencyMicros[percentile] / 1000));
    const quiet = name('quiet', label);
    const ratio = median(runs.reloading.map((r, i) => r.latencyMicros[percentile] / runs.quiet[i]!.latencyMicros[percentile]));
    return [
      { suite: SUITE, name: quiet, value: ms('quiet'), unit: 'ms' },
      { suite: SUITE, name: name('reloading', label), value: ms('reloading'), unit: 'ms', baseline: quiet, ratio },
    ];
  });
}

const routesSuite: BenchSuite = async (ctx) => {
  const upstreamPort = await freePort();
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  const children = [spawnEchoUpstream(upstreamPort)];
  const dirs: string[] = [];
  try {
    await waitFor(`${upstreamUrl}/`);
    const targets: Target[] = [];
    for (const count of SIZES) {
      const dir = await mkdtemp(join(tmpdir(), `gw-bench-routes-${count}-`));
      dirs.push(dir);
      await writeFile(join(dir, 'apis.yaml'), apiDefinitions(count, upstreamUrl));
      const started = Date.now();
      const sidecar = await startSidecarProcess(dir, { readyTimeoutMs: 120_000 });
      children.push(sidecar.child);
      ctx.log(`sidecar with ${count} APIs ready in ${Date.now() - started} ms`);
      const name = `sidecar keyless, ${count.toLocaleString('en')} APIs`;
      targets.push({ name, url: `${sidecar.base}${listenPath(TARGET)}bench`, ...(targets[0] ? { baseline: targets[0].name } : {}) });
    }
    const rounds = await measureRounds(ctx, targets, roundCount(3));
    const largest = targets.at(-1)!;
    return [...targets.flatMap((t) => rowsOf(SUITE, t, rounds)), ...lookupRows(ctx), ...(await reloadRows(ctx, largest.url, dirs.at(-1)!))];
  } finally {
    await Promise.all(children.map(stopChild));
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  }
};

export default routesSuite;
