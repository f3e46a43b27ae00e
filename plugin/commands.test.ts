import { describe, expect, it } from 'vitest';
import type { KeyLimitsAnswer } from '../crds/admin-answers.ts';
import { limitsTable } from './commands.ts';

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
