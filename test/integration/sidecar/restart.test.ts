import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, compiledConfig, eventually, servesApi, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';

describe('sidecar restart', () => {
  let upstream: EchoUpstream;

  beforeAll(async () => {
    upstream = await startEchoUpstream();
  });

  afterAll(async () => {
    await upstream?.close();
  });

  it('keeps counters in Redis across a restart (sliding log)', async () => {
    const namespace = await createNamespace('sc-restart');
    const api = compiledApi(uniqueId('api'), upstream.url, { api_limit: { rate: 3, per: 60 } });
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api], { enable_redis_rolling_limiter: true })));
    const url = (base: string): string => `${base}/${api.api_id}/`;

    const first = await startTestSidecar(sidecarOptions(namespace));
    await eventually(servesApi(first, api.api_id));
    expect((await call(url(first.proxyUrl))).status).toBe(200);
    expect((await call(url(first.proxyUrl))).status).toBe(200);
    await first.close();

    const second = await startTestSidecar(sidecarOptions(namespace));
    try {
      await eventually(servesApi(second, api.api_id));
      expect((await call(url(second.proxyUrl))).status).toBe(200);
      const limited = await call(url(second.proxyUrl));
      expect(limited.status).toBe(429);
      expect(limited.json()).toEqual({ error: 'API Rate Limit Exceeded' });
    } finally {
      await second.close();
    }
  });
});
