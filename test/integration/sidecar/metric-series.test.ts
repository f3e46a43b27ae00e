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

  it('drops the series of the APIs a config swap removes, and keeps the others and the unmatched', async () => {
    const apis = Array.from({ length: 30 }, (_, i) => compiledApi(uniqueId(`cut-${i}`), upstreamUrl));
    source.publish(compiledConfig(apis));
    // 16 requests each (two timed on average), and one no API matches.
    for (let round = 0; round < 16; round++) await Promise.all(apis.map(async (api) => expect((await call(`${sidecar.proxyUrl}/${api.api_id}/x`)).status).toBe(200)));
    expect((await call(`${sidecar.proxyUrl}/no-such-api/x`)).status).toBe(404);
    const families = ['gw_requests_total', 'gw_gateway_errors_total', 'gw_admission_duration_seconds_count', 'gw_upstream_duration_seconds_count'];
    for (const api of apis) expect((await byLabel(sidecar, 'gw_requests_total', 'api')).get(api.api_id)).toBe(16);

    const kept = apis.slice(0, 3);
    const before = await Promise.all(families.map((family) => byLabel(sidecar, family, 'api')));
    source.publish(compiledConfig(kept));
    const after = await Promise.all(families.map((family) => byLabel(sidecar, family, 'api')));
    const keptIds = new Set(kept.map((api) => api.api_id));
    families.forEach((family, i) => {
      const gone = [...after[i]!.keys()].filter((api) => api !== '' && !keptIds.has(api) && api.startsWith('cut-'));
      expect(gone, family).toEqual([]);
      // What stays keeps its counts; the requests no API matched stay too.
      for (const [api, value] of after[i]!) if (keptIds.has(api) || api === '') expect(value, `${family} of ${api}`).toBe(before[i]!.get(api));
    });
    expect(after[0]!.get('')).toBe(1);
    expect(after[1]!.get('')).toBe(1);
    for (const api of kept) expect(after[0]!.get(api.api_id)).toBe(16);
  }, 60_000);
});
