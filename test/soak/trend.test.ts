import { describe, expect, it } from 'vitest';
import { floors, judge, slopePerMinute, type Sample } from './trend.ts';

const series = (values: number[], everySeconds = 10): Sample[] => values.map((value, i) => ({ at: i * everySeconds, value }));

describe('soak verdict', () => {
  it('fits the slope per minute by least squares', () => {
    expect(slopePerMinute(series([0, 1, 2, 3, 4, 5]))).toBeCloseTo(6);
    expect(slopePerMinute(series([5, 5, 5]))).toBe(0);
    expect(slopePerMinute(series([7]))).toBe(0);
    // A sawtooth (garbage collection) around a level has no trend.
    expect(Math.abs(slopePerMinute(series([10, 14, 10, 14, 10, 14, 10, 14])))).toBeLessThan(3);
  });

  it('fails a series that keeps climbing in the last half, even when the first half was flat', () => {
    const leak = series([...Array(30).fill(100), ...Array.from({ length: 30 }, (_, i) => 100 + i * 0.5)]);
    const verdict = judge({ name: 'RSS', unit: 'MiB', maxPerMinute: 1.5 }, leak, 600);
    expect(verdict.perMinute).toBeCloseTo(3, 0);
    expect(verdict.ok).toBe(false);
  });

  it('passes a series that grows while warming up and then levels off', () => {
    const warm = series([...Array.from({ length: 30 }, (_, i) => 50 + i * 2), ...Array(30).fill(110)]);
    const verdict = judge({ name: 'RSS', unit: 'MiB', maxPerMinute: 1.5 }, warm, 600);
    expect(verdict.ok).toBe(true);
    expect(verdict.first).toBe(50);
    expect(verdict.last).toBe(110);
  });

  it('judges a sawing heap by its floor per window: collected garbage is no growth, a rising floor is', () => {
    const saw = series(Array.from({ length: 60 }, (_, i) => 60 + (i % 5) * 20));
    expect(floors(saw, 60).map((s) => s.value)).toEqual(Array(10).fill(60));
    expect(judge({ name: 'heap', unit: 'MiB', maxPerMinute: 1 }, floors(saw, 60), 600).ok).toBe(true);
    const rising = series(Array.from({ length: 60 }, (_, i) => 60 + (i % 5) * 20 + i * 0.5));
    expect(judge({ name: 'heap', unit: 'MiB', maxPerMinute: 1 }, floors(rising, 60), 600).ok).toBe(false);
  });
});
