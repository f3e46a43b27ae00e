import { existsSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, normalize, relative } from 'node:path';
import ts from 'typescript';

/**
 * Just enough of the Dockerfile format to check our images without a Docker engine:
 * continuation lines joined, comments dropped, instructions grouped by stage, and the
 * stage chain a target builds on followed back to its base image.
 */

export interface Instruction {
  keyword: string;
  args: string;
}

export interface Stage {
  name: string;
  base: string;
  instructions: Instruction[];
}

export interface Dockerfile {
  /** ARGs declared before the first FROM, with their defaults. */
  globalArgs: Record<string, string>;
  stages: Stage[];
}

function parseInstruction(line: string): Instruction | undefined {
  const match = /^(\S+)\s*(.*)$/.exec(line);
  return match ? { keyword: (match[1] ?? '').toUpperCase(), args: (match[2] ?? '').trim() } : undefined;
}

export function parseDockerfile(text: string): Dockerfile {
  const lines = text.replace(/\\\r?\n/g, ' ').split(/\r?\n/).map((l) => l.trim());
  const result: Dockerfile = { globalArgs: {}, stages: [] };
  for (const line of lines.filter((l) => l !== '' && !l.startsWith('#'))) {
    const instruction = parseInstruction(line);
    if (!instruction) continue;
    if (instruction.keyword === 'FROM') {
      const from = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(instruction.args);
      result.stages.push({ base: from?.[1] ?? '', name: from?.[2] ?? String(result.stages.length), instructions: [] });
    } else if (result.stages.length === 0 && instruction.keyword === 'ARG') {
      const [name = '', value = ''] = instruction.args.split('=');
      result.globalArgs[name] = value;
    } else {
      result.stages.at(-1)?.instructions.push(instruction);
    }
  }
  return result;
}

/** The stages a target is built from, base first. */
export function stageChain(file: Dockerfile, target: string): Stage[] {
  const chain: Stage[] = [];
  let current = file.stages.find((s) => s.name === target);
  while (current) {
    chain.unshift(current);
    const base = current.base;
    current = file.stages.find((s) => s.name === base);
  }
  return chain;
}

/** The image a chain finally rests on, with global ARG defaults substituted. */
export function baseImage(file: Dockerfile, chain: Stage[]): string {
  return (chain[0]?.base ?? '').replace(/^\$\{?(\w+)\}?$/, (_m, name: string) => file.globalArgs[name] ?? '');
}

export const instructionsOf = (chain: Stage[], keyword: string): Instruction[] => chain.flatMap((s) => s.instructions.filter((i) => i.keyword === keyword));

/** Exec-form arguments (JSON array) of an instruction such as ENTRYPOINT. */
export function execForm(instruction: Instruction | undefined): string[] | undefined {
  if (!instruction) return undefined;
  try {
    const parsed: unknown = JSON.parse(instruction.args);
    return Array.isArray(parsed) && parsed.every((a) => typeof a === 'string') ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A .dockerignore pattern as Docker reads it: Go's filepath.Match (`*` and `?` stop at
 * `/` but, unlike shell globs, match leading dots) plus `**` for any number of folders.
 */
function dockerGlob(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i += 1) {
    const c = pattern[i] ?? '';
    if (pattern.startsWith('**/', i)) {
      re += '(?:.*/)?';
      i += 2;
    } else if (pattern.startsWith('**', i)) {
      re += '.*';
      i += 1;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[' || c === ']') re += c;
    else re += c.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/** Whether .dockerignore keeps a path in the build context (last matching pattern wins, parents count). */
export function inBuildContext(dockerignore: string, path: string): boolean {
  const patterns = dockerignore
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const parts = path.split('/');
  const prefixes = parts.map((_p, i) => parts.slice(0, i + 1).join('/'));
  let included = true;
  for (const pattern of patterns) {
    const negated = pattern.startsWith('!');
    const glob = dockerGlob(normalize(negated ? pattern.slice(1) : pattern).replace(/\/$/, ''));
    if (prefixes.some((p) => glob.test(p))) included = negated;
  }
  return included;
}

export interface ImportClosure {
  /** Repository-relative paths of every source file reached. */
  files: string[];
  /** Bare package names imported (node: builtins left out). */
  packages: string[];
  /** Relative imports that resolve to no file. */
  missing: string[];
}

const packageName = (spec: string): string => (spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] ?? spec));
const isBuiltin = (spec: string): boolean => spec.startsWith('node:') || builtinModules.includes(spec);

/** Every file and package an entry point loads at run time, followed through relative imports. */
export function importClosure(root: string, entry: string): ImportClosure {
  const files = new Set<string>();
  const packages = new Set<string>();
  const missing: string[] = [];
  const queue = [entry];
  while (queue.length > 0) {
    const file = queue.pop() ?? '';
    if (files.has(file)) continue;
    files.add(file);
    const source = readFileSync(join(root, file), 'utf8');
    for (const { fileName } of ts.preProcessFile(source, true, true).importedFiles) {
      if (fileName.startsWith('.')) {
        const target = relative(root, join(root, dirname(file), fileName));
        if (existsSync(join(root, target))) queue.push(target);
        else missing.push(`${file} -> ${fileName}`);
      } else if (!isBuiltin(fileName)) {
        packages.add(packageName(fileName));
      }
    }
  }
  return { files: [...files].sort(), packages: [...packages].sort(), missing };
}

/** Executables a source file starts as child processes (execFile/spawn/run with a literal name). */
export function spawnedTools(source: string): string[] {
  return [...source.matchAll(/\b(?:execFile|execFileSync|spawn|spawnSync|run)\(\s*'([A-Za-z0-9._-]+)'/g)].map((m) => m[1] ?? '');
}
