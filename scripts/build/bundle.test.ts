import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { build } from 'rolldown';
import { latin1Source } from './bundle.ts';

describe('the bundles keep their source Latin-1, so V8 holds it one byte per character', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bundle-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const bundleOf = async (source: string): Promise<string> => {
    const input = join(dir, `m${Math.random().toString(36).slice(2)}.js`);
    writeFileSync(input, source);
    const { output } = await build({ input, write: false, logLevel: 'silent', plugins: [latin1Source], output: { format: 'esm', charset: 'ascii', minify: { compress: true, mangle: false } } });
    return output[0].code;
  };

  it('escapes wide characters in license comments, which the ascii charset leaves', async () => {
    const code = await bundleOf('/*! licence of José’s module … */\nexport const arrow = "→";\n');
    expect(code).toContain('/*! licence of José\\u{2019}s module \\u{2026} */');
    expect(code).toContain('\\u2192');
    expect(/[\u0100-\u{10ffff}]/u.test(code)).toBe(false);
  });

  it('fails the build on a wide character it cannot escape (a tagged template\'s raw text)', async () => {
    await expect(bundleOf('export const raw = String.raw`→`;\n')).rejects.toThrow(/a character past U\+00FF/);
  });
});
