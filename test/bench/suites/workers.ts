/**
 * Every core (issue 13): the sidecar with one worker and with two (`--workers 2`), keyless
 * and with an auth token and the sliding log in Redis, and nginx with one worker process and
 * two as the same machine's measure of what a second process can add while the load
 * generator, the upstream and Redis share its cores. Interleaved rounds as in the proxy suite.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keyHash } from '../../../crds/key-hash.ts';
import { freePort } from '../../harness/ports.ts';
import { measureRounds, roundCount, rowsOf, spawnEchoUpstream, startSidecarProcess, stopChild, waitFor, type Target } from '../http-load.ts';
import { startNginx, type RunningNginx } from '../nginx.ts';
import type { BenchSuite } from '../types.ts';
import { benchResources } from './proxy.ts';

const workersSuite: BenchSuite = async (ctx) => {
  const upstreamPort = await freePort();
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  const children = [spawnEchoUpstream(upstreamPort)];
  const nginxes: RunningNginx[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'gw-bench-workers-'));
  const rawKey = randomBytes(16).toString('hex');
  try {
    await writeFile(join(dir, 'bench.yaml'), benchResources(upstreamUrl, keyHash(rawKey)));
    await waitFor(`${upstreamUrl}/`);
    const targets: Target[] = [];
    for (const workers of [1, 2]) {
      const nginx = await startNginx(upstreamUrl, workers);
      nginxes.push(nginx);
      targets.push({ name: `nginx, ${workers} worker${workers > 1 ? 's' : ''}`, url: `${nginx.url}/bench`, baseline: workers > 1 ? 'nginx, 1 worker' : undefined });
    }
    const redisUrl = await ctx.redisUrl();
    for (const workers of [1, 2]) {
      const sidecar = await startSidecarProcess(dir, { redisUrl, env: { GW_WORKERS: String(workers), GW_ENABLE_REDIS_ROLLING_LIMITER: 'true' } });
      children.push(sidecar.child);
      const suffix = `${workers} worker${workers > 1 ? 's' : ''}`;
      targets.push({ name: `sidecar keyless, ${suffix}`, url: `${sidecar.base}/keyless/bench`, baseline: workers > 1 ? 'sidecar keyless, 1 worker' : undefined });
      targets.push({
        name: `sidecar auth-token + sliding log, ${suffix}`,
        url: `${sidecar.base}/auth/bench`,
        headers: { authorization: rawKey },
        baseline: workers > 1 ? 'sidecar auth-token + sliding log, 1 worker' : undefined,
      });
    }
    const rounds = await measureRounds(ctx, targets, roundCount(3));
    return targets.flatMap((t) => rowsOf('workers', t, rounds));
  } finally {
    await Promise.all([...children.map(stopChild), ...nginxes.map((n) => n.stop())]);
    await rm(dir, { recursive: true, force: true });
  }
};

export default workersSuite;
