import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { loadLocalSettings } from '../common/settings-loader.ts';
import { collectingLogger } from '../test/support/collecting-logger.ts';
import { warmUp } from './warm-up.ts';

const silent = pino({ level: 'silent' });

describe('warmUp', () => {
  it('sends every request through routing, authentication, the limits and the forwarder: all answered 200', async () => {
    // Rate-limit headers on, so the header path is the one the gateway will run.
    const local = loadLocalSettings(undefined, { GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits', GW_ENABLE_REDIS_ROLLING_LIMITER: 'true' });
    const result = await warmUp({ requests: 400, local, logger: silent });
    expect(result.statuses).toEqual({ 200: 400 });
    expect(result.failed).toBe(0);
  });

  it('answers through the http-proxy forwarder too when the settings choose it, and logs nothing of its own', async () => {
    const lines: string[] = [];
    const result = await warmUp({ requests: 100, local: loadLocalSettings(undefined, { GW_FORWARDER: 'http-proxy' }), logger: collectingLogger(lines) });
    expect(result.statuses).toEqual({ 200: 100 });
    // The warm-up's own gateway logs only what goes wrong: not its config load, nor anything else at info.
    expect(lines).toEqual([]);
  });

  it('sends none when told 0', async () => {
    const result = await warmUp({ requests: 0, local: loadLocalSettings(undefined, {}), logger: silent });
    expect(result).toEqual({ statuses: {}, failed: 0, elapsedMs: 0 });
  });

  it('stops at its deadline, and when the gateway closes', async () => {
    const local = loadLocalSettings(undefined, {});
    const capped = await warmUp({ requests: 1_000_000, local, logger: silent, deadlineMs: 300 });
    const answered = Object.values(capped.statuses).reduce((a, b) => a + b, 0);
    expect(answered).toBeGreaterThan(0);
    expect(answered).toBeLessThan(1_000_000);
    expect(capped.elapsedMs).toBeLessThan(5_000);

    const closing = new AbortController();
    setTimeout(() => closing.abort(), 200);
    const aborted = await warmUp({ requests: 1_000_000, local, logger: silent, signal: closing.signal });
    expect(aborted.elapsedMs).toBeLessThan(5_000);
  });
});
