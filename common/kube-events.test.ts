import { describe, expect, it } from 'vitest';
import { truncateUtf8 } from './kube-events.ts';

describe('truncateUtf8', () => {
  it('keeps text within the limit as it is', () => {
    expect(truncateUtf8('invalid regex', 1024)).toBe('invalid regex');
  });

  it('counts bytes, not UTF-16 units: 900 × é is 1,800 bytes', () => {
    const cut = truncateUtf8('é'.repeat(900), 1024);
    expect(cut).toBe('é'.repeat(512));
    expect(Buffer.byteLength(cut)).toBe(1024);
  });

  it('never splits a character, however many bytes it takes', () => {
    expect(truncateUtf8('aé', 2)).toBe('a');
    expect(truncateUtf8('a€', 3)).toBe('a');
    expect(truncateUtf8('a😀b', 4)).toBe('a');
    expect(truncateUtf8('a😀b', 5)).toBe('a😀');
  });
});
