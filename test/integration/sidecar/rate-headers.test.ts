import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, deployApi, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

describe('X-RateLimit-* under rate_limit_response_headers: rate_limits', () => {
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  let namespace: string;

  beforeAll(async () => {
    namespace = await createNamespace('sc-rate-headers');
    upstream = await startEchoUpstream();
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' } });
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
  });

  it('carries the rate limit on allowed and 429 responses, replacing the upstream ones', async () => {
    const api = compiledApi(uniqueId('api'), upstream.url, { api_limit: { rate: 2, per: 60 } });
    await deployApi(sidecar, namespace, api);
    const url = `${sidecar.proxyUrl}/${api.api_id}/?ratelimit=1`;
    const first = await call(url);
    expect(first.status).toBe(200);
    expect(first.headers['x-ratelimit-limit']).toBe('2');
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    const reset = Number(first.headers['x-ratelimit-reset']);
    expect(reset).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000));
    expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 61);
    await call(url);
    const limited = await call(url);
    expect(limited.status).toBe(429);
    expect(limited.headers['x-ratelimit-limit']).toBe('2');
    expect(limited.headers['x-ratelimit-remaining']).toBe('0');
  });

  it('sets none on an API without a rate limit, so the upstream ones pass', async () => {
    const api = compiledApi(uniqueId('api'), upstream.url);
    await deployApi(sidecar, namespace, api);
    const res = await call(`${sidecar.proxyUrl}/${api.api_id}/?ratelimit=1`);
    expect(res.headers['x-ratelimit-limit']).toBe('999');
  });
});
