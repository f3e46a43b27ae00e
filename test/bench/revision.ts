/**
 * `npm run bench -- proxy --against REV`: another revision of gw, built beside this tree, whose
 * sidecars the proxy suite runs next to this tree's in the same interleaved rounds. Separate
 * bench runs move a row by up to 8% on a 2-core machine, so a change of a few percent shows only
 * when both builds are measured turn by turn (README.md#benchmarks).
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, symlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { REPO_ROOT } from './http-load.ts';

const run = promisify(execFile);

/** What a revision must hold for its sidecar to run as its image runs it. */
const NEEDED = ['scripts/build/bundle.ts', 'scripts/images/build.ts', 'test/support/chart-node-options.ts', 'package-lock.json'];

/** A sidecar program as the bench starts it: its bundle, and the node flags and NODE_OPTIONS its image and chart ship. */
export interface SidecarBuild {
  entry: string;
  nodeFlags: string[];
  nodeOptions: string;
}

export interface Revision {
  /** The revision as given, and the commit it named. */
  rev: string;
  commit: string;
  /** What the rows print: `main~3 (1a2b3c4)`, or the commit alone when REV was one. */
  label: string;
  sidecar: SidecarBuild;
  /** Removes the revision's tree. */
  dispose(): Promise<void>;
}

/** The name of the row that measures `revision`'s build of this tree's row `name`. */
export function againstRowName(name: string, revision: Pick<Revision, 'label'>): string {
  return `${name} at ${revision.label}`;
}

/**
 * Extracts `rev` of `repo` into a folder of its own, gives it its dependencies (this tree's
 * node_modules when its lock file is the same, else its own `npm ci`), and builds its sidecar
 * bundle with its own bundler. The bundle runs with its own image's node flags and chart's
 * NODE_OPTIONS (BENCH_SIDECAR_NODE_OPTIONS replaces both trees' alike), so a change to those
 * shows too.
 */
export async function prepareRevision(rev: string, repo = REPO_ROOT): Promise<Revision> {
  const commit = await commitOf(rev, repo);
  const label = commit.startsWith(rev) ? commit.slice(0, Math.max(7, rev.length)) : `${rev} (${commit.slice(0, 7)})`;
  const root = await mkdtemp(join(tmpdir(), `gw-against-${commit.slice(0, 7)}-`));
  const dispose = (): Promise<void> => rm(root, { recursive: true, force: true });
  try {
    await extract(repo, commit, root);
    const missing = NEEDED.filter((file) => !existsSync(join(root, file)));
    if (missing.length > 0) throw new Error(`--against ${label}: the revision has no ${missing.join(', ')}, needed to build and run its sidecar as its image does (commit 357ae8a and later have them)`);
    await installDependencies(repo, root);
    const { bundle } = (await import(pathToFileURL(join(root, 'scripts/build/bundle.ts')).href)) as { bundle(program: 'sidecar', out: string): Promise<string> };
    const { imageNodeFlags } = (await import(pathToFileURL(join(root, 'scripts/images/build.ts')).href)) as { imageNodeFlags(image: 'sidecar'): string[] };
    const { chartNodeOptions } = (await import(pathToFileURL(join(root, 'test/support/chart-node-options.ts')).href)) as { chartNodeOptions(component: 'sidecar'): string };
    const sidecar = {
      entry: await bundle('sidecar', join(root, 'dist', 'bundle')),
      nodeFlags: imageNodeFlags('sidecar'),
      nodeOptions: process.env.BENCH_SIDECAR_NODE_OPTIONS ?? chartNodeOptions('sidecar'),
    };
    return { rev, commit, label, sidecar, dispose };
  } catch (err) {
    await dispose();
    throw err;
  }
}

async function commitOf(rev: string, repo: string): Promise<string> {
  try {
    const { stdout } = await run('git', ['-C', repo, 'rev-parse', '--verify', '--end-of-options', `${rev}^{commit}`]);
    return stdout.trim();
  } catch {
    throw new Error(`--against ${rev}: not a commit of ${repo}`);
  }
}

/** `git archive` into `root`: the revision's files without a worktree to unregister afterwards. */
function extract(repo: string, commit: string, root: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const archive = spawn('git', ['-C', repo, 'archive', '--format=tar', commit], { stdio: ['ignore', 'pipe', 'pipe'] });
    const untar = spawn('tar', ['-x', '-C', root], { stdio: ['pipe', 'ignore', 'pipe'] });
    archive.stdout.pipe(untar.stdin);
    let errors = '';
    for (const child of [archive, untar]) child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    let open = 2;
    const exited = (code: number | null): void => {
      if (code !== 0) reject(new Error(`extracting ${commit.slice(0, 7)} failed: ${errors.trim()}`));
      else if ((open -= 1) === 0) resolve();
    };
    archive.on('exit', exited);
    untar.on('exit', exited);
    archive.on('error', reject);
    untar.on('error', reject);
  });
}

async function installDependencies(repo: string, root: string): Promise<void> {
  const sameLock = readFileSync(join(repo, 'package-lock.json'), 'utf8') === readFileSync(join(root, 'package-lock.json'), 'utf8');
  if (sameLock && existsSync(join(repo, 'node_modules'))) {
    symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'), 'dir');
    return;
  }
  await run('npm', ['ci', '--no-audit', '--no-fund'], { cwd: root, maxBuffer: 64 * 1024 * 1024 });
}
