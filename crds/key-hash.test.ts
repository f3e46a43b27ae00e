import { describe, expect, it } from 'vitest';
import { keyHash, keyHashPattern } from './key-hash.ts';

describe('keyHash', () => {
  it('is the hex SHA-256 of the raw key', () => {
    // Known vector: sha256("abc").
    expect(keyHash('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  it('hashes the UTF-8 bytes and always matches the stored-hash pattern', () => {
    for (const raw of ['', 'é', 'key-with-ünïcode', 'x'.repeat(10_000)]) {
      expect(keyHash(raw)).toMatch(new RegExp(keyHashPattern));
    }
    expect(keyHash('é')).toBe('4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c');
    expect(keyHash('é')).not.toBe(keyHash('e'));
  });
});
