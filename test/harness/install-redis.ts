import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { HarnessStepError } from './errors.ts';
import { findOnPath } from './which.ts';

const run = promisify(execFile);

/**
 * Path of redis-server, installing Debian's package first when it is absent. The install
 * holds a lock so concurrent runs do not race on apt's own lock; no stdin is needed.
 */
export async function ensureRedisServer(): Promise<string> {
  const found = findOnPath('redis-server') ?? (existsSync('/usr/bin/redis-server') ? '/usr/bin/redis-server' : undefined);
  if (found) return found;
  const logPath = join(tmpdir(), 'gw-test-redis-install.log');
  const script = [
    `exec >>"${logPath}" 2>&1`,
    'command -v redis-server && exit 0',
    'export DEBIAN_FRONTEND=noninteractive',
    'apt-get update',
    'apt-get install -y --no-install-recommends redis-server redis-tools',
  ].join('\n');
  process.stderr.write(`gw-test-harness: installing Debian's redis-server (log: ${logPath})\n`);
  try {
    await run('flock', [join(tmpdir(), 'gw-test-apt.lock'), 'bash', '-c', script], { timeout: 600_000 });
  } catch (err) {
    throw new HarnessStepError('install-redis-server', logPath, (err as Error).message);
  }
  if (!existsSync('/usr/bin/redis-server')) {
    throw new HarnessStepError('install-redis-server', logPath, 'apt-get finished but /usr/bin/redis-server is missing');
  }
  return '/usr/bin/redis-server';
}
