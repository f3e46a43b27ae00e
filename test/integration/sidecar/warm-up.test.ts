import type { Logger } from '../../../common/logger.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { createNamespace } from '../../harness/index.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { call, compiledApi, compiledConfig, eventually, newRedis, servesApi, sidecarOptions, startTestSidecar, uniqueId, writeConfigMap } from './helpers.ts';

/** A logger, and what it logged as JSON objects. */
function loggedLines(): { logger: Logger; lines: () => Record<string, unknown>[] } {
  const output: string[] = [];
  return { logger: collectingLogger(output), lines: () => output.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

describe('sidecar warm-up before readiness', () => {
  let upstream: EchoUpstream;

  beforeAll(async () => {
    upstream = await startEchoUpstream();
  });

  afterAll(async () => {
    await upstream?.close();
  });

  it('turns ready once the warm-up has had all its requests answered, and leaves no trace in metrics, Redis or the log', async () => {
    const namespace = await createNamespace('sc-warm');
    const api = compiledApi(uniqueId('api'), upstream.url, { api_limit: { rate: 100, per: 60 } });
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api], { enable_redis_rolling_limiter: true, rate_limit_response_headers: 'rate_limits' })));
    const { logger, lines } = loggedLines();
    const sidecar = await startTestSidecar({ ...sidecarOptions(namespace), warmUpRequests: 3000 }, { logger });
    const redis = newRedis();
    try {
      await eventually(servesApi(sidecar, api.api_id));
      const warmed = (): Record<string, unknown> | undefined => lines().find((line) => line.msg === 'request path warmed up');
      await eventually(() => warmed() !== undefined, 30_000, 'the warm-up to end');
      expect(warmed()).toMatchObject({ statuses: { 200: 3000 }, failed: 0 });
      expect(sidecar.readiness()).toEqual({ ready: true, reasons: [], problems: [] });

      const answer = await call(`${sidecar.proxyUrl}/${api.api_id}/`);
      expect(answer.status).toBe(200);
      expect(answer.headers['x-ratelimit-remaining']).toBe('99');
      // The gateway's metrics count the one real request, none of the warm-up's.
      const requests = await sidecar.metrics.registry.getSingleMetric('gw_requests_total')!.get();
      expect(requests.values.map((v) => [v.labels.api, v.value])).toEqual([[api.api_id, 1]]);
      expect(await redis.keys('*warm-up*')).toEqual([]);
      expect(lines().filter((line) => JSON.stringify(line).includes('warm-up-key'))).toEqual([]);
    } finally {
      redis.disconnect();
      await sidecar.close();
    }
  });

  it('is unready while warming up; closed meanwhile, it stops the warm-up and closes at once', async () => {
    const namespace = await createNamespace('sc-warm-close');
    const { logger, lines } = loggedLines();
    // More requests than the deadline lets it send: it would warm for 10 s.
    const sidecar = await startTestSidecar({ ...sidecarOptions(namespace), warmUpRequests: 1_000_000 }, { logger });
    expect(sidecar.readiness().reasons).toContain('warming up');
    const started = Date.now();
    await sidecar.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    const warmed = lines().find((line) => line.msg === 'request path warmed up');
    expect(warmed).toMatchObject({ failed: 0 });
    expect(Object.values(warmed!.statuses as Record<string, number>).reduce((a, b) => a + b, 0)).toBeLessThan(1_000_000);
  });

  it('warmUpRequests 0 sends none and leaves readiness to the config', async () => {
    const namespace = await createNamespace('sc-warm-off');
    const api = compiledApi(uniqueId('api'), upstream.url);
    await writeConfigMap(namespace, api.api_id, JSON.stringify(compiledConfig([api])));
    const { logger, lines } = loggedLines();
    const sidecar = await startTestSidecar({ ...sidecarOptions(namespace), warmUpRequests: 0 }, { logger });
    try {
      await eventually(servesApi(sidecar, api.api_id));
      expect(sidecar.readiness()).toEqual({ ready: true, reasons: [], problems: [] });
      expect(lines().filter((line) => String(line.msg).includes('warm'))).toEqual([]);
    } finally {
      await sidecar.close();
    }
  });
});
