import type { Informer, KubernetesObject } from '@kubernetes/client-node';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from './logger.ts';
import { describeWatchError, RestartingInformer } from './restarting-informer.ts';

/**
 * The restart policy alone, on an informer whose lists fail on cue (a real API server's
 * restarts are in test/integration/operator/api-server-restart and sidecar/kube-reconnect).
 */
function failingInformer(failures: number) {
  let onError: (error: unknown) => void = () => undefined;
  const starts: number[] = [];
  let left = failures;
  const informer = {
    on: (verb: string, cb: (error: unknown) => void) => {
      if (verb === 'error') onError = cb;
    },
    start: async () => {
      starts.push(Date.now());
      if (left-- > 0) onError(new Error('connect ECONNREFUSED'));
    },
    stop: async () => undefined,
  };
  return { informer: informer as unknown as Informer<KubernetesObject>, starts, failWatch: () => onError(new Error('watch closed')) };
}

afterEach(() => vi.useRealTimers());

describe('an informer kept running through API-server outages', () => {
  it('restarts after each failure, doubling the delay up to the cap, and calls onListed after each good list', async () => {
    vi.useFakeTimers({ now: 0 });
    const { informer, starts, failWatch } = failingInformer(4);
    let listed = 0;
    const running = new RestartingInformer(informer, { log: createLogger('test', 'silent'), what: 'Thing', baseMs: 100, maxMs: 500, onListed: () => listed++ });
    await running.start();
    // Failing since the first failure in a row, with the last error, until a list succeeds.
    expect(running.failure()).toEqual({ sinceMs: 0, error: new Error('connect ECONNREFUSED') });
    await vi.advanceTimersByTimeAsync(2_000);
    expect(running.failure()).toBeUndefined();
    expect(starts).toEqual([0, 100, 300, 700, 1200]);
    expect(listed).toBe(1);
    // A good list whose watch then stayed up for the longest delay resets the backoff: the next failure waits the first delay again.
    failWatch();
    await vi.advanceTimersByTimeAsync(100);
    expect(starts.at(-1)).toBe(2100);
    expect(listed).toBe(2);
    await running.stop();
    failWatch();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(starts).toHaveLength(6);
  });

  it('keeps backing off a watch refused right after each good list, instead of listing again every first delay', async () => {
    vi.useFakeTimers({ now: 0 });
    let onError: (error: unknown) => void = () => undefined;
    const starts: number[] = [];
    const informer = {
      on: (verb: string, cb: (error: unknown) => void) => {
        if (verb === 'error') onError = cb;
      },
      // The list succeeds; the watch after it is refused 10 ms later.
      start: async () => {
        starts.push(Date.now());
        setTimeout(() => onError(Object.assign(new Error('Forbidden'), { statusCode: 403 })), 10);
      },
      stop: async () => undefined,
    } as unknown as Informer<KubernetesObject>;
    const running = new RestartingInformer(informer, { log: createLogger('test', 'silent'), what: 'Thing', baseMs: 100, maxMs: 500 });
    await running.start();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(starts).toEqual([0, 110, 320, 730, 1240, 1750]);
    await running.stop();
  });
});

describe('a watch error described for a status report', () => {
  it('names the HTTP status and the Status message, or the connection error, never the whole error text', () => {
    const watchRefused = Object.assign(new Error('Unauthorized'), { statusCode: 401 });
    expect(describeWatchError(watchRefused)).toBe('401 Unauthorized');
    // client-node's ApiException: its message holds the response's headers.
    const listRefused = Object.assign(new Error('HTTP-Code: 403\nMessage: …\nHeaders: {"audit-id":"x"}'), {
      code: 403,
      body: JSON.stringify({ kind: 'Status', message: 'configmaps is forbidden: User "system:serviceaccount:demo:gw-sidecar" cannot list resource "configmaps"' }),
    });
    expect(describeWatchError(listRefused)).toBe('403 Forbidden: configmaps is forbidden: User "system:serviceaccount:demo:gw-sidecar" cannot list resource "configmaps"');
    expect(describeWatchError(Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } }))).toBe('ECONNREFUSED (fetch failed)');
    expect(describeWatchError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), { code: 'ECONNREFUSED' }))).toBe('connect ECONNREFUSED 127.0.0.1:6443');
  });
});
