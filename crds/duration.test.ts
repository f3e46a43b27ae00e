import { describe, expect, it } from 'vitest';
import { parseDuration } from './duration.ts';

describe('parseDuration', () => {
  it.each([
    ['1s', 1_000],
    ['10s', 10_000],
    ['250ms', 250],
    ['1m30s', 90_000],
    ['2h', 7_200_000],
    ['1.5s', 1_500],
    ['500us', 0.5],
    ['500µs', 0.5],
    ['1000000ns', 1],
    ['0s', 0],
  ])('%s is %d ms', (text, ms) => {
    expect(parseDuration(text)).toEqual({ ok: true, ms });
  });

  it.each(['', '10', 's', '-1s', '+1s', '1 s', ' 1s', '1s ', '1d', '1S', '1.s', '.5s', '1e3s', '1s-', 'ten seconds'])(
    'refuses %j with a message naming the value',
    (text) => {
      const result = parseDuration(text);
      expect(result.ok).toBe(false);
      if (!result.ok) expect(result.message).toContain(`"${text}"`);
    },
  );

  it('refuses a window longer than a year', () => {
    expect(parseDuration('8761h')).toMatchObject({ ok: false, message: expect.stringContaining('maximum') });
    expect(parseDuration('8760h')).toEqual({ ok: true, ms: 8760 * 3_600_000 });
  });
});
