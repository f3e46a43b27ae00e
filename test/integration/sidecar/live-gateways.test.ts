import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { call, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/**
 * GET /gw/gateways on a standalone sidecar without Redis (README.md#admin-operations): the
 * gateway counts itself as the one live gateway of each API while the DRL may be used, and
 * lists none under another algorithm, where `heartbeats: false` says that none beat.
 */

const api = `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: toys }
spec:
  api_id: toys
  use_keyless: true
  proxy: { listen_path: /toys/, target_url: 'http://127.0.0.1:9' }
`;

describe('the live gateways read of a gateway without Redis', () => {
  let dir: string;
  const started: RunningSidecar[] = [];
  const start = async (settings: string): Promise<{ sidecar: RunningSidecar; instanceId: string }> => {
    const instanceId = uniqueId('live-gateways');
    const settingsFile = join(dir, `${instanceId}-settings.yaml`);
    await writeFile(settingsFile, settings);
    const sidecar = await startTestSidecar({ ...sidecarOptions('default', undefined), configDir: join(dir, 'config'), settingsFile, instanceId });
    started.push(sidecar);
    return { sidecar, instanceId };
  };
  const read = async (sidecar: RunningSidecar) => {
    const res = await call(`${sidecar.adminUrl}/gw/gateways`, { headers: { 'X-GW-Authorization': 'test-admin-secret' } });
    expect(res.status).toBe(200);
    return res.json();
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-live-gateways-'));
    await mkdir(join(dir, 'config'));
    await writeFile(join(dir, 'config', 'api.yaml'), api);
  });

  afterAll(async () => {
    await Promise.all(started.map((sidecar) => sidecar.close()));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('lists the gateway itself under the DRL, the default', async () => {
    const { sidecar, instanceId } = await start('{}\n');
    expect(await read(sidecar)).toEqual({ heartbeats: true, apis: [{ api_id: 'toys', gateways: [instanceId] }] });
  });

  it('lists no gateway under another algorithm, as heartbeats: false says', async () => {
    const { sidecar } = await start('enable_fixed_window_rate_limiter: true\n');
    expect(await read(sidecar)).toEqual({ heartbeats: false, apis: [{ api_id: 'toys', gateways: [] }] });
  });
});
