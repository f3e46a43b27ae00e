import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { build } from 'rolldown';
import { latin1Source, nodeGlobals } from './bundle.ts';

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

describe('the bundles bind the getter-backed globals Buffer, process and performance once', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bundle-globals-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const names = ['Buffer', 'process', 'performance'] as const;
  // What the gateway's dependencies do per argument they encode, in a module that imports nothing.
  const source = 'export function encode(parts) { let bytes = 0; for (const part of parts) bytes += Buffer.byteLength(part); return { bytes, pid: process.pid, clock: typeof performance.now() }; }\n';

  /** The module bundled (with or without the injection), imported, and run with each global's getter counted. */
  const runBundled = async (inject: boolean): Promise<{ result: unknown; reads: Record<string, number> }> => {
    const input = join(dir, `m${Math.random().toString(36).slice(2)}.js`);
    writeFileSync(input, source);
    const { output } = await build({ input, write: false, logLevel: 'silent', transform: inject ? { inject: nodeGlobals } : {}, output: { format: 'esm' } });
    const file = `${input}.bundled.mjs`;
    writeFileSync(file, output[0].code);
    const { encode } = (await import(file)) as { encode: (parts: string[]) => unknown };
    const reads: Record<string, number> = {};
    const originals = names.map((name) => [name, Object.getOwnPropertyDescriptor(globalThis, name)!] as const);
    for (const [name, descriptor] of originals) {
      reads[name] = 0;
      Object.defineProperty(globalThis, name, { ...descriptor, get: () => (reads[name]!++, descriptor.get!.call(globalThis)) });
    }
    try {
      return { result: encode(['a', 'bb', 'ccc']), reads };
    } finally {
      for (const [name, descriptor] of originals) Object.defineProperty(globalThis, name, descriptor);
    }
  };

  it('Node defines all three as getters, which the bundle would otherwise call on every read', async () => {
    for (const name of names) expect(Object.getOwnPropertyDescriptor(globalThis, name)?.get).toBeTypeOf('function');
    const { result, reads } = await runBundled(false);
    expect(result).toEqual({ bytes: 6, pid: process.pid, clock: 'number' });
    expect(reads).toEqual({ Buffer: 3, process: 1, performance: 1 });
  });

  it('reads none of them through the getter, and gets the same objects', async () => {
    const { result, reads } = await runBundled(true);
    expect(result).toEqual({ bytes: 6, pid: process.pid, clock: 'number' });
    expect(reads).toEqual({ Buffer: 0, process: 0, performance: 0 });
  });
});
