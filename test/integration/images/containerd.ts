/**
 * A containerd of the test's own (its own root, state and socket; no CRI plugin, so it
 * touches nothing on the machine), to import archives the way a node does.
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface Containerd {
  /** `ctr -n k8s.io …` against this containerd: its standard output. */
  ctr(args: string[]): Promise<string>;
}

export async function withContainerd<T>(use: (containerd: Containerd) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-containerd-'));
  const socket = join(dir, 'containerd.sock');
  const log = join(dir, 'containerd.log');
  writeFileSync(join(dir, 'config.toml'), [
    'version = 2',
    `root = "${dir}/root"`,
    `state = "${dir}/state"`,
    'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
    '[grpc]',
    `  address = "${socket}"`,
  ].join('\n'));
  const output = openSync(log, 'a');
  const daemon = spawn('containerd', ['--config', join(dir, 'config.toml')], { stdio: ['ignore', output, output] });
  closeSync(output);
  try {
    for (let i = 0; i < 100 && !existsSync(socket) && daemon.exitCode === null; i += 1) await new Promise((resolve) => setTimeout(resolve, 100));
    if (!existsSync(socket)) throw new Error(`containerd did not start:\n${readFileSync(log, 'utf8')}`);
    return await use({
      ctr: async (args) => (await run('ctr', ['--address', socket, '-n', 'k8s.io', ...args], { timeout: 120_000 })).stdout,
    });
  } finally {
    if (daemon.pid !== undefined && daemon.exitCode === null && daemon.signalCode === null) {
      const exited = once(daemon, 'exit');
      daemon.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
