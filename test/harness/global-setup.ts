import { join } from 'node:path';
import { ensureBins, linkBinDir } from './bins.ts';
import { startControlPlaneServers, type ControlPlaneHandle } from './control-plane.ts';
import { applyCrds } from './crds.ts';
import { publishTestEnv } from './env.ts';
import { sessionDir, sweepStaleSessions } from './procs.ts';
import { startRedisServer, type RedisHandle } from './redis.ts';

/**
 * vitest global setup of the integration project: builds or reuses the pinned binaries,
 * starts one Redis and one control plane for the whole run, applies the product CRDs,
 * and tears all of it down at the end (procs.ts covers interrupted runs).
 */
export default async function setup(): Promise<() => Promise<void>> {
  const started = Date.now();
  const log = (msg: string): void => void process.stderr.write(`gw-test-harness: ${msg}\n`);
  const swept = sweepStaleSessions();
  if (swept.length > 0) log(`swept ${swept.length} session(s) left by runs that are gone`);
  const bins = await ensureBins();
  log(`binaries ready after ${elapsed(started)}`);
  let redis: RedisHandle | undefined;
  let plane: ControlPlaneHandle | undefined;
  const teardown = async (): Promise<void> => {
    await Promise.allSettled([redis?.dispose(), plane?.stop()]);
  };
  try {
    const [r, p] = await Promise.allSettled([startRedisServer(), startControlPlaneServers(bins)]);
    if (r.status === 'fulfilled') redis = r.value;
    if (p.status === 'fulfilled') plane = p.value;
    if (r.status === 'rejected') throw r.reason;
    if (p.status === 'rejected') throw p.reason;
    const crds = await applyCrds(p.value.kubeconfig);
    const binDir = linkBinDir(join(sessionDir(), 'bin'), bins);
    publishTestEnv({ kubeconfig: p.value.kubeconfig, redisUrl: r.value.url, helmBin: bins.helm, binDir });
    log(`test bed up after ${elapsed(started)}: redis ${r.value.url}, kube-apiserver ${p.value.server}, ${crds} CRD file(s)`);
  } catch (err) {
    await teardown();
    throw err;
  }
  return teardown;
}

function elapsed(since: number): string {
  return `${((Date.now() - since) / 1000).toFixed(1)} s`;
}
