import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { HarnessStepError } from './errors.ts';

const run = promisify(execFile);

export interface DebianInstall {
  /** Names the step in errors and the log file. */
  step: string;
  packages: string[];
  /** Files that exist once the packages are installed; all present means nothing to do. */
  provides: string[];
}

/**
 * Installs Debian packages unless every file they provide is already there. One lock for
 * every install of the harness, so concurrent runs do not race on apt's own lock; apt also
 * waits for a lock held by anything else. No stdin is needed.
 */
export async function ensureDebianPackages(install: DebianInstall): Promise<void> {
  if (install.provides.every((path) => existsSync(path))) return;
  const logPath = join(tmpdir(), `gw-test-${install.step}.log`);
  const script = [
    `exec >>"${logPath}" 2>&1`,
    'export DEBIAN_FRONTEND=noninteractive',
    // The package lists of a fresh machine may be empty or stale.
    'apt-get -o DPkg::Lock::Timeout=600 update',
    `apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends ${install.packages.join(' ')}`,
  ].join('\n');
  process.stderr.write(`gw-test-harness: installing Debian's ${install.packages.join(', ')} (log: ${logPath})\n`);
  try {
    await run('flock', [join(tmpdir(), 'gw-test-apt.lock'), 'bash', '-c', script], { timeout: 900_000 });
  } catch (err) {
    throw new HarnessStepError(install.step, logPath, (err as Error).message);
  }
  const missing = install.provides.filter((path) => !existsSync(path));
  if (missing.length > 0) {
    throw new HarnessStepError(install.step, logPath, `apt-get finished but ${missing.join(', ')} is missing`);
  }
}
