import { describe, expect, it } from 'vitest';
import { AdminError } from './errors.ts';
import { pathId } from './params.ts';

describe('pathId', () => {
  // Any id a resource may have (crds/schemas/common.ts idPattern), dots in a row too.
  it.each(['api1', 'my-api.v2', 'A_b-9', '0abc', 'x'.repeat(253), 'a%2Db', 'v1..2', 'a...'])('accepts %s', (raw) => {
    expect(pathId(raw, 'apiID')).toBe(decodeURIComponent(raw));
  });

  it.each([
    ['empty', ''],
    ['parent reference', '..'],
    ['encoded parent reference', '%2E%2E'],
    ['encoded slash', 'a%2Fb'],
    ['encoded traversal', '%2E%2E%2Fetc'],
    ['encoded NUL', 'a%00'],
    ['bad percent-encoding', '%E0%A4%A'],
    ['unicode', 'caf%C3%A9'],
    ['leading dot', '.hidden'],
    ['leading dash', '-x'],
    ['space', 'a%20b'],
    ['too long', 'x'.repeat(254)],
  ])('refuses %s', (_label, raw) => {
    expect(() => pathId(raw, 'apiID')).toThrow(AdminError);
    try {
      pathId(raw, 'apiID');
    } catch (error) {
      expect((error as AdminError).def.status).toBe(400);
      expect((error as AdminError).message).toContain('apiID');
    }
  });
});
