import { describe, expect, it } from 'vitest';
import { smoothStep } from './smoothing.ts';

// threshold 3, step 2, trigger 0.5, rate 10, delay 1 s
const settings = { enabled: true, threshold: 3, step: 2, trigger: 0.5, delay: 1 };

describe('smoothStep', () => {
  it.each([
    // allowance, changedAt, requests, now -> allowance, changedAt
    ['up: rate above allowance − step×trigger', 4, 0, 4, 5000, 6, 5000],
    ['no change at exactly allowance − step×trigger', 4, 0, 3, 5000, 4, 0],
    ['up is capped at rate', 9, 0, 9, 5000, 10, 5000],
    ['never above rate', 10, 0, 50, 5000, 10, 0],
    ['down: rate below allowance − step×(1+trigger)', 8, 0, 4, 5000, 6, 5000],
    ['no change at exactly allowance − step×(1+trigger)', 8, 0, 5, 5000, 8, 0],
    ['down is capped at threshold', 4, 0, 0, 5000, 3, 5000],
    ['never below threshold', 3, 0, 0, 5000, 3, 0],
    ['hold-off: no event within delay of the last', 4, 4500, 9, 5000, 4, 4500],
    ['hold-off over after delay', 4, 4000, 9, 5000, 6, 5000],
    ['hold-off applies to down too', 8, 4500, 0, 5000, 8, 4500],
  ])('%s', (...row) => {
    const [, allowance, changedAt, requests, now, expectedAllowance, expectedChangedAt] = row;
    expect(smoothStep({ allowance, changedAt }, requests, 10, settings, now)).toEqual({
      allowance: expectedAllowance,
      changedAt: expectedChangedAt,
    });
  });
});
