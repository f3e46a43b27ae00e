import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { gatewayHeartbeatKey } from '../../../common/redis-keys.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { createNamespace } from '../../harness/index.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { compiledApi, deployApi, eventually, newRedis, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/**
 * `--listen off` (the chart's admin gateway): the admin operations only. Such a gateway
 * serves every API's config for the admin operations, but it proxies nothing, so it must
 * not be counted among the gateways that split a DRL limit.
 */
describe('a gateway with its proxy listener off', () => {
  const redis = newRedis();
  const started: RunningSidecar[] = [];
  let upstream: Server | undefined;

  afterAll(async () => {
    await Promise.all(started.map((s) => s.close()));
    upstream?.close();
    redis.disconnect();
  });

  it('opens no proxy port and takes no share of a DRL limit, while a proxying gateway does', async () => {
    upstream = createServer((_req, res) => res.end('ok')).listen(0, '127.0.0.1');
    await new Promise((resolve) => upstream?.once('listening', resolve));
    const target = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    const namespace = await createNamespace('admin-only');
    const apiId = uniqueId('drl');
    const api = compiledApi(apiId, target, { api_limit: { rate: 10, per: 60 } });

    const adminOnly = await startTestSidecar({ ...sidecarOptions(namespace), listen: 'off', instanceId: 'admin-only' });
    started.push(adminOnly);
    const proxying = await startTestSidecar({ ...sidecarOptions(namespace), instanceId: 'proxying' });
    started.push(proxying);
    expect(adminOnly.proxyUrl).toBe('off');
    await deployApi(proxying, namespace, api);
    await eventually(() => adminOnly.runtime.apis().some((a) => a.api_id === apiId), 10_000, 'admin gateway loaded the API');

    // Heartbeats are every 2 s: after a few, only the proxying gateway is a member.
    await eventually(async () => (await redis.zrange(gatewayHeartbeatKey(apiId), '0', '-1')).includes('proxying'), 10_000, 'heartbeat');
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    expect(await redis.zrange(gatewayHeartbeatKey(apiId), '0', '-1')).toEqual(['proxying']);

    // The one proxying gateway is alone: it admits the whole limit.
    const statuses: number[] = [];
    for (let i = 0; i < 11; i += 1) statuses.push((await fetch(`${proxying.proxyUrl}${api.listen_path}x`)).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.at(-1)).toBe(429);
  });

  it('says at start which admin operations refuse every call because their secret is not set', async () => {
    const namespace = await createNamespace('admin-secrets');
    const lines: string[] = [];
    const unset = await startTestSidecar({ ...sidecarOptions(namespace), listen: 'off', adminSecret: '', portalSecret: undefined }, { logger: collectingLogger(lines) });
    started.push(unset);
    const warning = lines.map((line) => JSON.parse(line) as { msg: string; unset?: string[] }).find((r) => r.msg === 'the admin operations whose secret is not set refuse every call');
    expect(warning?.unset).toEqual([expect.stringMatching(/^GW_ADMIN_SECRET .*: 403$/), expect.stringMatching(/^GW_PORTAL_SECRET .*: 401$/)]);
    const res = await fetch(`${unset.adminUrl}/admin/org/keys`, { method: 'POST', headers: { 'Admin-Auth': '', 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(403);
    const set: string[] = [];
    started.push(await startTestSidecar({ ...sidecarOptions(namespace), listen: 'off' }, { logger: collectingLogger(set) }));
    expect(set.some((line) => line.includes('whose secret is not set'))).toBe(false);
  });
});
