import { describe, expect, it } from 'vitest';
import type { KeyLimitsAnswer } from '../crds/admin-answers.ts';
import { gatewaysTable, limitsTable } from './commands.ts';
import { age } from './output.ts';

const nowMs = 1_800_000_000_000;
const refusedByKey: KeyLimitsAnswer = {
  key_hash: 'h',
  key_id: 'thr-key',
  api_id: 'orders',
  method: 'GET',
  path: '/orders/',
  authentication: 'key',
  access: 'granted',
  outcome: 'key_rate_limited',
  refused_by: 'key_global',
  answer: { status: 429, code: 'key_rate_limited' },
  limits: [
    {
      level: 'key_global',
      source: { kind: 'Policy', namespace: 'ns', name: 'thr' },
      rule: null,
      rate: 2,
      per: 3,
      algorithm: 'sliding_log',
      drl: null,
      smoothing: null,
      unused_smoothing: null,
      count: 2,
      limit: 2,
      remaining: 0,
      reset: nowMs / 1000 + 3,
    },
  ],
  quota: null,
  throttle: null,
  passed_over: [],
  chosen_over: [],
  unused_smoothing: [],
};

const throttle = { interval: 1, retries: 5, max_wait: 30 };

describe('kubectl gw limits', () => {
  it('says that a refused request of a throttled key waits in the gateway first, in both layouts', () => {
    for (const wide of [false, true]) {
      const text = limitsTable('ns/thr-key', { ...refusedByKey, throttle }, wide, nowMs);
      expect(text).toContain('\nThrottled: a request its rate limits refuse waits in the gateway, looking again every 1 s up to 5 times (at most 30 s), and is refused only if none finds room.\n');
    }
    expect(limitsTable('ns/thr-key', refusedByKey, true, nowMs)).not.toContain('Throttled');
  });

  it('headlines a throttled key\'s rate-limited request as waiting, refused only if no retry finds room', () => {
    const headline = (answer: KeyLimitsAnswer): string => limitsTable('ns/thr-key', answer, false, nowMs).split('\n')[0]!;
    expect(headline({ ...refusedByKey, throttle })).toBe(
      'Key ns/thr-key on API orders, GET /orders/: a request now waits in the gateway (throttled: up to 5 retries every 1 s, at most 30 s), and is refused by key_global: 429 key_rate_limited only if no retry finds room',
    );
    expect(headline(refusedByKey)).toBe('Key ns/thr-key on API orders, GET /orders/: a request now is refused by key_global: 429 key_rate_limited');
    // Throttling holds rate-limit refusals only: a spent quota refuses at once.
    const quotaSpent = { ...refusedByKey, throttle, outcome: 'quota_exceeded', refused_by: 'quota', answer: { status: 403, code: 'quota_exceeded' } } as const;
    expect(headline(quotaSpent)).toBe('Key ns/thr-key on API orders, GET /orders/: a request now is refused by quota: 403 quota_exceeded');
  });
});

describe('kubectl gw limits -o wide', () => {
  it('shows a DRL share with the number of gateways sharing the rate', () => {
    const drl = (gateways: number) => ({ ...refusedByKey, limits: [{ ...refusedByKey.limits[0]!, algorithm: 'drl' as const, drl: { share: 2, gateways } }] });
    expect(limitsTable('ns/thr-key', drl(1), true, nowMs).split('\n')[3]).toMatch(/\s2\/3s\s+2 \(1 gateway\)\s/);
    expect(limitsTable('ns/thr-key', drl(3), true, nowMs).split('\n')[3]).toMatch(/\s2\/3s\s+2 \(3 gateways\)\s/);
  });
});

describe('kubectl gw durations', () => {
  it('prints AGE and LAST SEEN as kubectl does, with a second unit where it keeps one', () => {
    const now = new Date(nowMs);
    const ages = [45, 119, 314, 600, 3 * 3600 - 1, 7 * 3600 + 180, 20 * 3600, 3 * 86_400 + 5 * 3600, 4 * 86_400, 30 * 86_400, 800 * 86_400, 9 * 365 * 86_400];
    expect(ages.map((s) => age(new Date(nowMs - s * 1000), now))).toEqual(['45s', '119s', '5m14s', '10m', '179m', '7h3m', '20h', '3d5h', '4d', '30d', '2y70d', '9y']);
  });

  it('prints a quota\'s RESET as a duration, not a count of seconds', () => {
    const quota = { source: { kind: 'Policy', namespace: 'ns', name: 'thr' }, max: 100, renewal: 3600, used: 100, remaining: 0, reset: nowMs / 1000 + 3592 };
    const [, , , , row] = limitsTable('ns/thr-key', { ...refusedByKey, quota }, false, nowMs).split('\n');
    expect(row).toMatch(/^quota\s+Policy\/thr\s+-\s+-\s+100\s+100\s+0\s+59m$/);
  });

  it('reads RESET from the time now unrounded: the gateway rounds the reset up, so a fresh 60 s window reads 60s, not 61s', () => {
    // A window opened 0.7 s into a second: its reset, rounded up, is 61 s past that second.
    const opened = nowMs + 700;
    const quota = { source: { kind: 'Policy', namespace: 'ns', name: 'thr' }, max: 100, renewal: 60, used: 1, remaining: 99, reset: nowMs / 1000 + 61 };
    const [, , , , row] = limitsTable('ns/thr-key', { ...refusedByKey, quota }, false, opened).split('\n');
    expect(row).toMatch(/\s60s$/);
  });

  it('says when the gateway read lists no API, rather than a table heading with no rows', () => {
    expect(gatewaysTable({ gateways: { heartbeats: true, apis: [] } })).toBe('Gateways seen live: none to list (the gateway read has loaded no API, and gateways are counted per API).\n');
  });
});
