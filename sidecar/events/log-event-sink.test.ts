import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../common/logger.ts';
import { createSidecarMetrics } from '../metrics.ts';
import type { SmoothingEvent } from '../limits/types.ts';
import { LOG_EVENT_BURST, LogEventSink } from './log-event-sink.ts';

/** A logger whose JSON lines are kept. */
function keptLines(): { lines: Record<string, unknown>[]; logger: ReturnType<typeof createLogger> } {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, logger: createLogger('test', 'info', destination) };
}

const event = (key: number): SmoothingEvent => ({
  reason: 'RateLimitSmoothingUp',
  source: { kind: 'Key', namespace: 'default', name: `key-${key}` },
  limiterKey: `limiter-${key}`,
  oldAllowance: 2,
  newAllowance: 4,
  time: new Date(),
});

describe('LogEventSink', () => {
  it('logs a burst of smoothing events, counts the rest as dropped, and says how many the next line follows', async () => {
    const { lines, logger } = keptLines();
    const metrics = createSidecarMetrics(undefined, { processMetrics: false });
    const sink = new LogEventSink(logger, metrics);
    // 3,000 smoothed keys moving at once.
    for (let key = 0; key < 3000; key++) sink.emit(event(key));
    await sleep(20);
    expect(lines.length).toBe(LOG_EVENT_BURST);
    const written = async (result: string): Promise<number> =>
      (await metrics.events.get()).values.find((v) => v.labels.result === result && v.labels.reason === 'RateLimitSmoothingUp')?.value ?? 0;
    expect(await written('logged')).toBe(LOG_EVENT_BURST);
    expect(await written('dropped')).toBe(3000 - LOG_EVENT_BURST);

    // A token back a second later: the next event is logged, with the count of those not logged before it.
    await sleep(1100);
    sink.emit(event(3000));
    await sleep(20);
    expect(lines.length).toBe(LOG_EVENT_BURST + 1);
    expect(lines.at(-1)).toMatchObject({ suppressed: 3000 - LOG_EVENT_BURST, source: { name: 'key-3000' } });
    expect(lines[0]).not.toHaveProperty('suppressed');
  });
});
