import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { testEnv } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';
import { call, eventually, spawnSidecar, uniqueId, type SidecarChild } from './helpers.ts';

/** A keyless API whose API-level limit is smoothed: each request above the allowance moves it up. */
function apiYaml(id: string, upstream: string): string {
  return `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: ${id} }
spec:
  api_id: ${id}
  name: ${id}
  use_keyless: true
  global_rate_limit: { rate: 40, per: 3600, smoothing: { enabled: true, threshold: 2, step: 2, trigger: 0.5, delay: 0 } }
  proxy: { listen_path: /${id}/, target_url: '${upstream}', strip_listen_path: true }
`;
}

describe('the primary of several workers drops the series of an API the config no longer has', () => {
  let upstream: EchoUpstream;
  let dir: string;
  let child: SidecarChild | undefined;

  beforeAll(async () => {
    upstream = await startEchoUpstream();
    dir = await mkdtemp(join(tmpdir(), 'gw-workers-series-'));
  });

  afterAll(async () => {
    if (child && child.proc.exitCode === null) {
      child.proc.kill('SIGTERM');
      await child.exited;
    }
    await upstream?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('in gw_smoothing_allowance and in the per-API sums', async () => {
    const [stay, cut] = [uniqueId('stay'), uniqueId('cut')];
    await writeFile(join(dir, 'apis.yaml'), [apiYaml(stay, upstream.url), apiYaml(cut, upstream.url)].join('---\n'));
    const [listen, admin, health] = await Promise.all([freePort(), freePort(), freePort()]);
    child = spawnSidecar(
      ['--config', dir, '--listen', `127.0.0.1:${listen}`, '--admin-listen', `127.0.0.1:${admin}`, '--health-listen', `127.0.0.1:${health}`, '--workers', '2', '--redis-url', testEnv().redisUrl],
      { GW_ENABLE_REDIS_ROLLING_LIMITER: 'true', GW_INSTANCE_ID: uniqueId('series') },
    );
    const metrics = async (): Promise<string> => (await call(`http://127.0.0.1:${health}/metrics`)).text;
    await eventually(async () => (await call(`http://127.0.0.1:${health}/readyz`).catch(() => ({ status: 0 }))).status === 200 || child!.proc.exitCode !== null, 30_000, 'ready');
    expect(child.proc.exitCode, child.stderr()).toBeNull();

    // Each request on a new connection, so both workers meet them.
    for (let i = 0; i < 6; i++) for (const id of [stay, cut]) await call(`http://127.0.0.1:${listen}/${id}/x`);
    const allowance = (id: string): RegExp => new RegExp(`^gw_smoothing_allowance\\{kind="ApiDefinition",namespace="default",name="${id}"\\} \\d+$`, 'm');
    const requests = (id: string): RegExp => new RegExp(`^gw_requests_total\\{api="${id}",code_class="2xx"\\} \\d+$`, 'm');
    const before = await metrics();
    for (const id of [stay, cut]) {
      expect(before).toMatch(allowance(id));
      expect(before).toMatch(requests(id));
    }

    await writeFile(join(dir, 'apis.yaml'), apiYaml(stay, upstream.url));
    // Both workers have loaded the config without it once neither serves it.
    await eventually(async () => {
      for (let i = 0; i < 6; i++) if ((await call(`http://127.0.0.1:${listen}/${cut}/x`)).status !== 404) return false;
      return true;
    }, 10_000, 'the API removed on both workers');
    await eventually(async () => !allowance(cut).test(await metrics()), 10_000, 'the removed API’s allowance gone');
    const after = await metrics();
    expect(after).not.toContain(`api="${cut}"`);
    expect(after).toMatch(allowance(stay));
    expect(after).toMatch(requests(stay));
  }, 90_000);
});
