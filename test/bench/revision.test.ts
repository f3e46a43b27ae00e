import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { imageNodeFlags } from '../../scripts/images/build.ts';
import { chartNodeOptions } from '../support/chart-node-options.ts';
import { REPO_ROOT, roundOrder, startSidecarProcess, stopChild, twinsOf, type Target } from './http-load.ts';
import { againstRowName, prepareRevision } from './revision.ts';

const git = (cwd: string, ...args: string[]): string => execFileSync('git', ['-C', cwd, ...args], { encoding: 'utf8' }).trim();
/** The folders `prepareRevision` left in the temp dir for a commit. */
const leftFor = (commit: string): string[] => readdirSync(tmpdir()).filter((name) => name.startsWith(`gw-against-${commit.slice(0, 7)}-`));

describe('--against REV: another revision built beside this tree', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'gw-revision-test-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  /** A repository whose one commit predates the bundler: it holds a lock file and nothing to build. */
  const older = join(scratch, 'older');
  execFileSync('git', ['init', '-q', older]);
  writeFileSync(join(older, 'package-lock.json'), '{}\n');
  git(older, 'add', '.');
  git(older, '-c', 'user.name=gw', '-c', 'user.email=gw@example.invalid', 'commit', '-q', '-m', 'before the bundler');
  const olderCommit = git(older, 'rev-parse', 'HEAD');

  it('names the revision as given and the commit it named, or the commit alone when given one', async () => {
    await expect(prepareRevision(olderCommit.slice(0, 10), older)).rejects.toThrow(`--against ${olderCommit.slice(0, 10)}: the revision has no`);
    await expect(prepareRevision('HEAD', older)).rejects.toThrow(`--against HEAD (${olderCommit.slice(0, 7)}): the revision has no`);
  });

  it('names what it could not find when REV is not a commit', async () => {
    await expect(prepareRevision('no-such-revision-of-gw', REPO_ROOT)).rejects.toThrow(/--against no-such-revision-of-gw: not a commit of /);
  });

  it('names the files an older revision lacks, and leaves nothing behind', async () => {
    await expect(prepareRevision('HEAD', older)).rejects.toThrow(
      `--against HEAD (${olderCommit.slice(0, 7)}): the revision has no scripts/build/bundle.ts, scripts/images/build.ts, test/support/chart-node-options.ts`,
    );
    expect(leftFor(olderCommit)).toEqual([]);
  });

  it("builds the revision's sidecar with its own bundler, runs it with its own flags, and removes its tree when disposed", { timeout: 180_000 }, async () => {
    const commit = git(REPO_ROOT, 'rev-parse', 'HEAD');
    const before = new Set(leftFor(commit));
    const revision = await prepareRevision('HEAD', REPO_ROOT);
    const [root] = leftFor(commit).filter((name) => !before.has(name)).map((name) => join(tmpdir(), name));
    try {
      expect(revision).toMatchObject({ rev: 'HEAD', commit, label: `HEAD (${commit.slice(0, 7)})` });
      expect(revision.sidecar.entry).toBe(join(root!, 'dist', 'bundle', 'sidecar', 'gw-sidecar.mjs'));
      // The revision's own files, as committed: its tree holds what git holds at that commit.
      expect(readFileSync(join(root!, 'sidecar', 'main.ts'), 'utf8')).toBe(git(REPO_ROOT, 'show', `${commit}:sidecar/main.ts`) + '\n');
      expect(existsSync(join(root!, 'dist', 'bundle', 'sidecar', 'limits.lua'))).toBe(true);
      // The same lock file as this tree's: its node_modules is shared rather than installed again.
      expect(lstatSync(join(root!, 'node_modules')).isSymbolicLink()).toBe(true);
      expect(revision.sidecar.nodeFlags).toEqual(imageNodeFlags('sidecar'));
      expect(revision.sidecar.nodeOptions).toBe(process.env.BENCH_SIDECAR_NODE_OPTIONS ?? chartNodeOptions('sidecar'));
      const config = join(scratch, 'config');
      mkdirSync(config);
      writeFileSync(join(config, 'api.yaml'), `apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: open }
spec: { api_id: open, name: open, use_keyless: true, proxy: { listen_path: /open/, target_url: 'http://127.0.0.1:9', strip_listen_path: true } }
`);
      const sidecar = await startSidecarProcess(config, { build: revision.sidecar, readyTimeoutMs: 60_000 });
      try {
        const ready = await fetch(`${sidecar.health}/readyz`);
        expect(ready.status).toBe(200);
        // Nothing listens on the discard port: the revision's gateway answers for its upstream.
        expect((await fetch(`${sidecar.base}/open/`)).status).toBe(502);
      } finally {
        await stopChild(sidecar.child);
      }
    } finally {
      await revision.dispose();
    }
    expect(existsSync(root!)).toBe(false);
  });
});

describe("--against's rows", () => {
  const target = (name: string, twinOf?: string): Target => ({ name, url: 'http://127.0.0.1:1/', ...(twinOf === undefined ? {} : { twinOf }) });
  const bare = target('bare undici forwarder');
  const keyless = target('sidecar keyless (undici)');
  const keylessThen = target(againstRowName(keyless.name, { label: 'main~1 (1a2b3c4)' }), keyless.name);
  const auth = target('sidecar auth-token + sliding log (undici)');
  const authThen = target(againstRowName(auth.name, { label: 'main~1 (1a2b3c4)' }), auth.name);
  const httpProxy = target('sidecar keyless (http-proxy)');
  const targets = [bare, keyless, keylessThen, auth, authThen, httpProxy];

  it("pairs each of this tree's rows with the revision's row of the same, and no other", () => {
    expect(keylessThen.name).toBe('sidecar keyless (undici) at main~1 (1a2b3c4)');
    expect(twinsOf(targets)).toEqual([
      [keyless, keylessThen.name],
      [auth, authThen.name],
    ]);
  });

  it('measures each twin first every other round, the other rows in their order', () => {
    expect(roundOrder(targets, 0)).toEqual(targets);
    expect(roundOrder(targets, 1)).toEqual([bare, keylessThen, keyless, authThen, auth, httpProxy]);
    expect(roundOrder(targets, 2)).toEqual(targets);
    expect(roundOrder([bare, keyless, httpProxy], 1)).toEqual([bare, keyless, httpProxy]);
  });
});
