import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { labelValueFor } from './label-value.ts';

describe('labelValueFor', () => {
  it('keeps a text that is a label value, and hashes one that is not', () => {
    expect(labelValueFor('abc-123')).toBe('abc-123');
    expect(labelValueFor('k'.repeat(63))).toBe('k'.repeat(63));
    const long = labelValueFor('x'.repeat(100));
    expect(long).toBe(`h-${createHash('sha256').update('x'.repeat(100)).digest('hex').slice(0, 40)}`);
    expect(labelValueFor('a/b')).toMatch(/^h-[0-9a-f]{40}$/);
  });
});
