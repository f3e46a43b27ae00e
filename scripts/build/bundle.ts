/**
 * npm run build [-- [--out DIR]]
 *
 * Bundles the operator and the sidecar into DIR/<program>/gw-<program>.mjs (default
 * dist/bundle), one ES module each with its dependencies, tree-shaken and minified. The images
 * run these bundles rather than the sources: a process then loads only the code it uses, which
 * for @kubernetes/client-node's generated API classes is a small part of its 24 MB
 * (docs/architecture.md#the-images has the figures).
 */
import { copyFileSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { parseArgs } from 'node:util';
import { build, type Plugin } from 'rolldown';

const ROOT = join(import.meta.dirname, '..', '..');
export const DEFAULT_BUNDLE_DIR = join(ROOT, 'dist', 'bundle');

export type Program = 'operator' | 'sidecar';
export const PROGRAMS: Program[] = ['operator', 'sidecar'];

/** What each program's bundle holds besides code: files its modules read at run time. */
const ASSETS: Record<Program, string[]> = {
  operator: [],
  // Read next to the module that loads it (sidecar/limits/stores/limits-script.ts).
  sidecar: ['sidecar/limits/stores/limits.lua'],
};

/**
 * V8 keeps a module's source in memory as a string, one byte per character only when every
 * character is Latin-1: one character past U+00FF doubles the size of the whole chunk (the
 * operator's 4 MB bundle took 8 MB of heap for 23 of them). `charset: 'ascii'` escapes those
 * in code; what it leaves are license comments, escaped here, and the build fails should
 * anything else be left.
 */
export const latin1Source: Plugin = {
  name: 'gw-latin1-source',
  generateBundle(_options, output) {
    for (const chunk of Object.values(output)) {
      if (chunk.type !== 'chunk') continue;
      chunk.code = chunk.code.replace(/\/\*![\s\S]*?\*\//g, (comment) => comment.replace(/[\u0100-\u{10ffff}]/gu, (c) => `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`));
      const wide = /[\u0100-\u{10ffff}]/u.exec(chunk.code);
      if (wide) this.error(`${chunk.fileName}: a character past U+00FF (${JSON.stringify(chunk.code.slice(Math.max(0, wide.index - 40), wide.index + 10))}) would make V8 hold the chunk as a two-byte string`);
    }
  },
};

/**
 * Node defines these globals as getters (kept for an ES module deprecation path), so every
 * read of one is a call that V8's optimizing compiler does not fold away. The gateway's
 * dependencies read `Buffer` dozens of times per request (ioredis for every argument it
 * encodes), so the bundle imports them from their modules instead: the same objects, bound
 * once (docs/architecture.md#performance).
 */
export const nodeGlobals: Record<string, [string, string]> = {
  Buffer: ['node:buffer', 'Buffer'],
  performance: ['node:perf_hooks', 'performance'],
  process: ['node:process', 'default'],
};

/** The path of a program's entry module in a bundle folder. */
export function bundleEntry(program: Program, out = DEFAULT_BUNDLE_DIR): string {
  return join(out, program, `gw-${program}.mjs`);
}

export async function bundle(program: Program, out = DEFAULT_BUNDLE_DIR): Promise<string> {
  const dir = join(out, program);
  rmSync(dir, { recursive: true, force: true });
  await build({
    input: join(ROOT, program, 'main.ts'),
    platform: 'node',
    logLevel: 'warn',
    plugins: [latin1Source],
    transform: { inject: nodeGlobals },
    output: {
      dir,
      format: 'esm',
      entryFileNames: `gw-${program}.mjs`,
      // The sidecar's primary process imports only what it needs (sidecar/main.ts), so lazily
      // imported modules stay chunks of their own.
      chunkFileNames: '[name]-[hash].mjs',
      // Names stay, so a stack trace in a log still says which function threw.
      minify: { compress: true, mangle: false },
      sourcemap: true,
      charset: 'ascii',
    },
  });
  for (const asset of ASSETS[program]) copyFileSync(join(ROOT, asset), join(dir, basename(asset)));
  return bundleEntry(program, out);
}

const builtOnce = new Map<Program, Promise<string>>();

/** The program's bundle in the default folder, built once per process: what the benches and the soak run, as the images do. */
export function bundleOnce(program: Program): Promise<string> {
  let built = builtOnce.get(program);
  if (!built) builtOnce.set(program, (built = bundle(program)));
  return built;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { out: { type: 'string', default: DEFAULT_BUNDLE_DIR } } });
  for (const program of PROGRAMS) process.stdout.write(`${await bundle(program, values.out)}\n`);
}

if (import.meta.main) await main();
