/**
 * What reports of session changes cost Redis as the fleet grows (docs/architecture.md#sessions):
 * Redis CPU per session write, each written alone as a Key applied or created through the
 * admin API is, with a fleet of gateway processes connected, in three ways: none of them
 * tracking (the baseline), every one told of every change (broadcast mode, what gw did first;
 * test/support/session-changes.ts keeps it), and each told of the sessions it read (tracked
 * reads, what the gateway does), each session read by a few of them.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createLogger } from '../../../common/logger.ts';
import { sessionKey } from '../../../common/redis-keys.ts';
import { gatewayTold } from '../../support/session-changes.ts';
import type { BenchRow, BenchSuite } from '../types.ts';

const SUITE = 'session-reports';
/** Gateway processes: a sidecar fleet is as large as the app's pods. */
const GATEWAYS = 100;
/** Gateways that read each session: the pods its client's requests reach. */
const READERS = 3;
const SESSION = JSON.stringify({ rate: 100, per: 60, quota_max: -1, access_rights: { shop: { api_id: 'shop', api_name: 'shop', versions: ['Default'] } }, alias: 'bench' });

type Mode = 'none' | 'broadcast' | 'tracked reads';

interface Figures {
  cpuMicrosPerWrite: number;
  reportsPerWrite: number;
}

async function redisCpuMicros(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string): number => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(info)?.[1]);
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1e6;
}

async function measure(url: string, mode: Mode, writes: number): Promise<Figures> {
  const logger = createLogger('bench', 'silent');
  const writer = new Redis(url);
  const hashes = Array.from({ length: writes }, () => randomBytes(32).toString('hex'));
  const gateways = Array.from({ length: GATEWAYS }, () => gatewayTold(url, mode, logger));
  const reports = (): number => gateways.reduce((sum, g) => sum + g.told.length, 0);
  try {
    await writer.mset(hashes.flatMap((hash) => [sessionKey(hash), SESSION]));
    for (let waited = 0; !gateways.every((g) => g.feed === undefined || g.feed.tracking); waited += 50) {
      if (waited > 20_000) throw new Error(`${mode}: the gateways did not all track within 20 s`);
      await sleep(50);
    }
    // Each session is read by READERS gateways in turn, so Redis's table (tracked reads) holds them.
    await Promise.all(gateways.map(async (gateway, g) => {
      for (let i = 0; i < writes; i++) if ((i - g + GATEWAYS) % GATEWAYS < READERS) await gateway.cache.get(hashes[i]!);
    }));
    const reportsBefore = reports();
    const before = await redisCpuMicros(writer);
    for (const hash of hashes) await writer.set(sessionKey(hash), `${SESSION} `);
    const expected = mode === 'none' ? 0 : writes * (mode === 'broadcast' ? GATEWAYS : READERS);
    for (let waited = 0; reports() - reportsBefore < expected && waited < 30_000; waited += 50) await sleep(50);
    const after = await redisCpuMicros(writer);
    const reported = reports() - reportsBefore;
    if (reported !== expected) throw new Error(`${mode}: ${reported} reports of ${writes} writes, expected ${expected}`);
    return { cpuMicrosPerWrite: (after - before) / writes, reportsPerWrite: reported / writes };
  } finally {
    await Promise.all(gateways.map((g) => g.close()));
    await writer.flushall();
    writer.disconnect();
  }
}

const suite: BenchSuite = async (ctx) => {
  const url = await ctx.redisUrl();
  const writes = Math.max(200, Math.round(ctx.durationMs / 5));
  const rows: BenchRow[] = [];
  const name = (mode: Mode): string =>
    mode === 'none' ? `${GATEWAYS} gateways connected, none tracking` : mode === 'broadcast' ? `${GATEWAYS} gateways, broadcast` : `${GATEWAYS} gateways, tracked reads (each session read by ${READERS})`;
  for (const mode of ['none', 'broadcast', 'tracked reads'] as const) {
    ctx.log(`${name(mode)}: ${writes} session writes, one at a time`);
    const figures = await measure(url, mode, writes);
    const baseline = mode === 'none' ? undefined : `${name('none')}: Redis CPU per session write`;
    rows.push(
      { suite: SUITE, name: `${name(mode)}: Redis CPU per session write`, value: figures.cpuMicrosPerWrite, unit: 'µs', baseline },
      { suite: SUITE, name: `${name(mode)}: reports per session write`, value: figures.reportsPerWrite, unit: 'reports' },
    );
  }
  const cpu = (mode: Mode): number => rows.find((r) => r.name === `${name(mode)}: Redis CPU per session write`)!.value;
  rows.push({ suite: SUITE, name: 'Redis CPU per session write, broadcast / tracked reads', value: cpu('broadcast') / cpu('tracked reads'), unit: 'ratio' });
  return rows;
};

export default suite;
