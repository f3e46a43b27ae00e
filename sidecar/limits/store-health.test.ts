import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../common/logger.ts';
import { STORE_STEADY_MS, StoreHealth } from './store-health.ts';

/** A StoreHealth logging into `lines` (one message per line). */
function health(lines: string[]): StoreHealth {
  const out = new Writable({
    write: (chunk: Buffer, _encoding, done) => {
      lines.push((JSON.parse(chunk.toString()) as { msg: string }).msg);
      done();
    },
  });
  return new StoreHealth(createLogger('t', 'info', out));
}

describe('StoreHealth', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('logs an outage once while calls fail and succeed by turns (a Cluster with one master down), and its end once calls have kept succeeding', () => {
    const lines: string[] = [];
    const store = health(lines);
    // 4 s of a Cluster with one master of three down: every third call fails.
    for (let call = 0; call < 120; call++) {
      if (call % 3 === 0) {
        store.failed(new Error('connect ECONNREFUSED 127.0.0.1:7001'));
        expect(store.failingNow()).toBe(true);
      } else {
        store.succeeded();
        expect(store.failingNow()).toBe(false);
      }
      vi.advanceTimersByTime(33);
    }
    expect(lines).toEqual(['rate-limit store unreachable']);
    // The master is back: the end is told once calls have gone on succeeding long enough.
    store.succeeded();
    vi.advanceTimersByTime(STORE_STEADY_MS - 100);
    store.succeeded();
    expect(lines).toEqual(['rate-limit store unreachable']);
    vi.advanceTimersByTime(200);
    expect(lines).toEqual(['rate-limit store unreachable', 'rate-limit store reachable again']);
    vi.advanceTimersByTime(STORE_STEADY_MS * 2);
    expect(lines).toHaveLength(2);
  });

  it('logs a later outage again', () => {
    const lines: string[] = [];
    const store = health(lines);
    store.failed(new Error('first'));
    store.succeeded();
    vi.advanceTimersByTime(STORE_STEADY_MS);
    store.failed(new Error('second'));
    expect(store.failingNow()).toBe(true);
    store.succeeded();
    vi.advanceTimersByTime(STORE_STEADY_MS);
    expect(lines).toEqual(['rate-limit store unreachable', 'rate-limit store reachable again', 'rate-limit store unreachable', 'rate-limit store reachable again']);
  });
});
