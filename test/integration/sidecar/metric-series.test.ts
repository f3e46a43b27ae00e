import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { HandSource } from '../../support/hand-source.ts';
import { call, compiledApi, compiledConfig, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/** The value of each series of `name` whose labels include `label="…"`, by that label's value. */
async function byLabel(sidecar: RunningSidecar, name: string, label: string): Promise<Map<string, number>> {
  const text = (await call(`${sidecar.healthUrl}/metrics`)).text;
  const values = new Map<string, number>();
  for (const [, labels, value] of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))) {
    const of = new RegExp(`${label}="([^"]*)"`).exec(labels!)?.[1];
    if (of !== undefined) values.set(of, (values.get(of) ?? 0) + Number(value));
  }
  return values;
}

describe('per-API metric series', () => {
  let upstream: Server;
  let upstreamUrl: string;
  let sidecar: RunningSidecar;
  let source: HandSource;

  beforeAll(async () => {
    upstream = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    source = new HandSource(compiledConfig([]));
    sidecar = await startTestSidecar(sidecarOptions('default', undefined), { source });
  }, 30_000);

  afterAll(async () => {
    await sidecar?.close();
    await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
  }, 30_000);

  it('times each of two APIs that one client alternates between', async () => {
    const apis = [compiledApi(uniqueId('even'), upstreamUrl), compiledApi(uniqueId('odd'), upstreamUrl)];
    source.publish(compiledConfig(apis));
    for (let i = 0; i < 320; i++) expect((await call(`${sidecar.proxyUrl}/${apis[i % 2]!.api_id}/x`)).status).toBe(200);
    // 20 samples each on average (one request in 8): a fixed one in 8 gave one API all 40 and the other none.
    for (const metric of ['gw_admission_duration_seconds_count', 'gw_upstream_duration_seconds_count']) {
      const counts = await byLabel(sidecar, metric, 'api');
      for (const api of apis) expect(counts.get(api.api_id) ?? 0, `${metric} of ${api.api_id}`).toBeGreaterThan(5);
    }
  }, 60_000);
});
