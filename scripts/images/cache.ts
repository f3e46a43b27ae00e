/**
 * Files and folders that builds keep between runs, written so that concurrent builds (two
 * test runs, or a test run and `npm run images`) never see one another's half-written work.
 */
import { existsSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** Where to write what will become `path`: a name of this process's own. */
export function partialPath(path: string): string {
  return `${path}.${process.pid}.partial`;
}

/**
 * Moves finished work into place. A folder that a concurrent build has already put there
 * stays (same inputs, same content), and this build's copy goes.
 */
export function publish(partial: string, path: string): void {
  try {
    renameSync(partial, path);
  } catch (err) {
    if (!existsSync(path)) throw err;
    rmSync(partial, { recursive: true, force: true });
  }
}

/** Removes the entries named `<prefix><hash>` other than `keep`, work in progress left alone. */
export function pruneOthers(keep: string, prefix: string): void {
  const dir = dirname(keep);
  for (const name of readdirSync(dir)) {
    if (name.startsWith(prefix) && name !== basename(keep) && !name.endsWith('.partial')) rmSync(join(dir, name), { recursive: true, force: true });
  }
}
