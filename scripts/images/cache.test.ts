import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { partialPath, publish, pruneOthers } from './cache.ts';

describe('the build cache', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-cache-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const folder = (path: string, content: string): void => {
    mkdirSync(path, { recursive: true });
    writeFileSync(join(path, 'file'), content);
  };

  it('a folder published while a concurrent build already put one there stays, the late copy goes', () => {
    const target = join(dir, 'modules-a');
    folder(partialPath(target), 'first');
    publish(partialPath(target), target);
    folder(partialPath(target), 'second');
    publish(partialPath(target), target);
    expect(readFileSync(join(target, 'file'), 'utf8')).toBe('first');
    expect(readdirSync(dir)).toEqual(['modules-a']);
  });

  it('older entries of the same kind go, work in progress and other kinds stay', () => {
    for (const name of ['modules-old', 'modules-new', 'node-1', `modules-next.${process.pid + 1}.partial`]) folder(join(dir, name), name);
    pruneOthers(join(dir, 'modules-new'), 'modules-');
    expect(readdirSync(dir).sort()).toEqual(['modules-new', `modules-next.${process.pid + 1}.partial`, 'node-1']);
  });
});
