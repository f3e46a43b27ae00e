import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, compiledApi, deployApi, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

interface Bed {
  upstream: EchoUpstream;
  sidecar: RunningSidecar;
  namespace: string;
}

/** An echo upstream and a sidecar showing rate_limits headers in a namespace of their own, for one describe block. */
function rateHeadersSidecar(namespacePrefix: string): Bed {
  const bed = {} as Bed;
  beforeAll(async () => {
    bed.namespace = await createNamespace(namespacePrefix);
    bed.upstream = await startEchoUpstream();
    bed.sidecar = await startTestSidecar(sidecarOptions(bed.namespace), { env: { GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits' } });
  });
  afterAll(async () => {
    await bed.sidecar?.close();
    await bed.upstream?.close();
  });
  return bed;
}

describe('X-RateLimit-* under rate_limit_response_headers: rate_limits', () => {
  const bed = rateHeadersSidecar('sc-rate-headers');

  it('carries the rate limit on allowed and 429 responses, replacing the upstream ones', async () => {
    const api = compiledApi(uniqueId('api'), bed.upstream.url, { api_limit: { rate: 2, per: 60 } });
    await deployApi(bed.sidecar, bed.namespace, api);
    const url = `${bed.sidecar.proxyUrl}/${api.api_id}/?ratelimit=1`;
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
    const api = compiledApi(uniqueId('api'), bed.upstream.url);
    await deployApi(bed.sidecar, bed.namespace, api);
    const res = await call(`${bed.sidecar.proxyUrl}/${api.api_id}/?ratelimit=1`);
    expect(res.headers['x-ratelimit-limit']).toBe('999');
  });
});

/** A namespace of its own: the sidecar serves one set of settings, the sliding log's. */
describe('X-RateLimit-Reset under the sliding log', () => {
  const bed = rateHeadersSidecar('sc-sliding-reset');
  const settings = { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' as const };

  it('a 429\'s reset is when a caller that waits for it passes again', async () => {
    const per = 3;
    const api = compiledApi(uniqueId('api'), bed.upstream.url, { api_limit: { rate: 2, per } });
    await deployApi(bed.sidecar, bed.namespace, api, settings);
    const url = `${bed.sidecar.proxyUrl}/${api.api_id}/`;
    const statuses: number[] = [];
    let limited: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 4; i++) {
      // The refusals come well over a second (the headers' unit) after the admissions.
      if (i === 2) await new Promise((resolve) => setTimeout(resolve, 1_500));
      const res = await call(url);
      statuses.push(res.status);
      if (res.status === 429) limited = res;
    }
    // The 429s are logged too (spike arrest): the reset waits for the first of them to leave
    // the window, where the oldest entry's leaving would still find two in it.
    expect(statuses).toEqual([200, 200, 429, 429]);
    const reset = Number(limited!.headers['x-ratelimit-reset']);
    expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + per);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, reset * 1000 - Date.now()) + 50));
    expect((await call(url)).status).toBe(200);
  });
});
