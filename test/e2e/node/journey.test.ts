/**
 * The packaging proved on a real node: the images of `npm run images` imported into the
 * node's containerd exactly as README.md says, then the user's journey (scripts/journey/),
 * the same steps `npm run e2e:kind` runs on kind. Afterwards the machine holds nothing of
 * the node: no network namespace, mount, process, cgroup or iptables rule, and the
 * sysctls the kubelet rewrote are back.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureBins, linkBinDir } from '../../harness/bins.ts';
import { ensureImageHostFiles } from '../../harness/install-image-host-files.ts';
import { testBedImages } from '../../harness/node/images.ts';
import { startNode, type NodeHandle } from '../../harness/node/node.ts';
import { sessionDir } from '../../harness/procs.ts';
import { runTool } from '../../harness/run-tool.ts';
import { readmeBlock } from '../../../scripts/journey/readme-blocks.ts';

const ROOT = join(import.meta.dirname, '..', '..', '..');
const KUBELET_SYSCTLS = ['kernel.panic', 'kernel.panic_on_oops', 'vm.overcommit_memory', 'vm.panic_on_oom'];

/** Processes whose command line names `path`. */
function processesUnder(path: string): string[] {
  return readdirSync('/proc').filter((pid) => /^\d+$/.test(pid)).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(path);
    } catch {
      return false;
    }
  });
}

const sysctls = (): string[] => KUBELET_SYSCTLS.map((k) => readFileSync(`/proc/sys/${k.replaceAll('.', '/')}`, 'utf8').trim());
const hostIptables = (): string => execFileSync('iptables-save', { encoding: 'utf8' });

describe('the user journey on a real node (kubelet, containerd, CoreDNS)', () => {
  let node: NodeHandle | undefined;
  const sysctlsBefore = sysctls();
  const kubeChainsBefore = (hostIptables().match(/KUBE-/g) ?? []).length;

  afterAll(async () => {
    await node?.stop();
  }, 180_000);

  it('installs with the README, runs every step of the journey, and leaves the machine as it was', async () => {
    const bins = await ensureBins();
    const started = Date.now();
    node = await startNode(bins, { images: await testBedImages(bins) });
    const nodeUpSeconds = (Date.now() - started) / 1000;
    await ensureImageHostFiles();

    // README.md's images block, word for word, against the node's containerd.
    const images = await runTool('bash', ['-euo', 'pipefail', '-c', readmeBlock('images-no-registry')], {
      timeoutMs: 600_000,
      allowFail: true,
      cwd: ROOT,
      env: { ...process.env, CONTAINERD_ADDRESS: join(node.root, 'containerd', 'containerd.sock') },
    });
    expect(images.code, images.stderr).toBe(0);
    const imported = await runTool('ctr', ['--address', join(node.root, 'containerd', 'containerd.sock'), '-n', 'k8s.io', 'images', 'ls', '-q'], { timeoutMs: 30_000 });
    for (const image of ['gw-operator', 'gw-sidecar', 'gw-redis']) {
      expect(imported.stdout).toContain(`docker.io/library/${image}:`);
    }

    // A hostPath volume behaves like a local provisioner's: a fresh folder any pod user may write.
    const redisVolume = join(node.volumesDir, 'redis');
    mkdirSync(redisVolume, { recursive: true });
    chmodSync(redisVolume, 0o777);
    const binDir = linkBinDir(join(sessionDir(), `journey-bin-${Date.now()}`), bins);
    const journey = await runTool(node.nsenter[0] as string,
      [...node.nsenter.slice(1), process.execPath, join(ROOT, 'scripts', 'journey', 'journey.ts'), '--hostpath-pv', redisVolume],
      { timeoutMs: 900_000, allowFail: true, env: { ...process.env, KUBECONFIG: node.kubeconfig, PATH: `${binDir}:${process.env.PATH ?? ''}` } });
    process.stdout.write(`node up in ${nodeUpSeconds.toFixed(1)} s:\n${node.timings.map(([s, t]) => `  ${t.toFixed(1).padStart(6)} s  ${s}`).join('\n')}\n${journey.stdout}`);
    expect(journey.code, `${/JOURNEY FAILED.*/.exec(journey.stderr)?.[0] ?? ''}\n${journey.stderr.slice(-3000)}`).toBe(0);
    expect(journey.stdout).toContain('journey passed');

    const { root, netns } = node;
    await node.stop();
    node = undefined;
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toContain(netns);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(root);
    expect(existsSync(root)).toBe(false);
    expect(processesUnder(root)).toEqual([]);
    // The node's cgroup has the name of its network namespace.
    expect(existsSync(`/sys/fs/cgroup/memory/${netns}`)).toBe(false);
    expect((hostIptables().match(/KUBE-/g) ?? []).length).toBe(kubeChainsBefore);
    expect(sysctls()).toEqual(sysctlsBefore);
  }, 1_500_000);
});

describe('a node whose run is killed', () => {
  const sysctlsBefore = sysctls();

  it('leaves nothing either: the run\'s reaper sweeps the node', async () => {
    const runRoot = mkdtempSync(join(tmpdir(), 'gw-killed-run-'));
    const child = spawn(process.execPath, [join(ROOT, 'test', 'harness', 'node', 'cli.ts')], {
      env: { ...process.env, GW_TEST_RUN_ROOT: runRoot },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    for (let i = 0; i < 240 && !output.includes('is up in network namespace'); i += 1) await sleep(500);
    const netns = /network namespace (gwnode-\w+)/.exec(output)?.[1];
    expect(netns, output).toBeDefined();
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).toContain(netns);
    expect(processesUnder(runRoot).length).toBeGreaterThan(5);
    child.kill('SIGKILL');
    for (let i = 0; i < 120 && existsSync(join(runRoot)) && readdirSync(runRoot).length > 0; i += 1) await sleep(500);
    expect(readdirSync(runRoot)).toEqual([]);
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toContain(netns);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(runRoot);
    expect(processesUnder(runRoot)).toEqual([]);
    expect(existsSync(`/sys/fs/cgroup/memory/${netns}`)).toBe(false);
    expect(sysctls()).toEqual(sysctlsBefore);
    rmSync(runRoot, { recursive: true, force: true });
  }, 300_000);
});
