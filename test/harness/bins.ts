import { spawn } from 'node:child_process';
import { mkdirSync, symlinkSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { HarnessStepError } from './errors.ts';
import { findOnPath } from './which.ts';

export interface TestBins {
  kubeApiserver: string;
  etcd: string;
  helm: string;
  kubectl: string;
  /** The node's binaries, from the same Kubernetes release as kube-apiserver. */
  kubeControllerManager: string;
  kubeScheduler: string;
  kubelet: string;
  kubeProxy: string;
  coredns: string;
}

const BUILD_SCRIPT = join(import.meta.dirname, 'build-bins.sh');

/** The cache folder of the test bed's binaries, as build-bins.sh chooses it. */
export function testBinsDir(): string {
  return process.env.GW_TEST_BINS_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'gw-test-bins');
}

/** kubectl from PATH: it is a machine prerequisite, not something the harness builds. */
export function findKubectl(): string {
  const found = findOnPath('kubectl');
  if (!found) {
    throw new HarnessStepError('find-kubectl', '(none)', 'kubectl is not on PATH; install kubectl 1.32 or newer and retry');
  }
  return found;
}

/**
 * Builds the pinned Kubernetes binaries, etcd, Helm and CoreDNS once per machine (or reuses
 * the cached ones); build-bins.sh owns the cache, its lock and its logs.
 */
export async function ensureBins(): Promise<TestBins> {
  const kubectl = findKubectl();
  const { code, stdout, stderr } = await runScript();
  if (code !== 0) {
    const logPath = /log: (\S+)/.exec(stderr)?.[1] ?? '(see output above)';
    const step = /step '([^']+)'/.exec(stderr)?.[1] ?? 'build-test-binaries';
    throw new HarnessStepError(step, logPath, `build-bins.sh exited with ${code}`);
  }
  const paths = new Map(stdout.trim().split('\n').map((line) => line.split('=', 2) as [string, string]));
  const get = (name: string): string => {
    const p = paths.get(name);
    if (!p) throw new HarnessStepError('build-test-binaries', BUILD_SCRIPT, `no path reported for ${name}`);
    return p;
  };
  return {
    kubeApiserver: get('kube-apiserver'),
    etcd: get('etcd'),
    helm: get('helm'),
    kubectl,
    kubeControllerManager: get('kube-controller-manager'),
    kubeScheduler: get('kube-scheduler'),
    kubelet: get('kubelet'),
    kubeProxy: get('kube-proxy'),
    coredns: get('coredns'),
  };
}

/** A folder with all four binaries under their usual names, for PATH or direct use. */
export function linkBinDir(dir: string, bins: TestBins): string {
  mkdirSync(dir, { recursive: true });
  symlinkSync(bins.kubeApiserver, join(dir, 'kube-apiserver'));
  symlinkSync(bins.etcd, join(dir, 'etcd'));
  symlinkSync(bins.helm, join(dir, 'helm'));
  symlinkSync(bins.kubectl, join(dir, 'kubectl'));
  return dir;
}

function runScript(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', [BUILD_SCRIPT], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      // Progress of a long first build stays visible.
      process.stderr.write(d);
    });
    child.once('error', (err) => resolve({ code: 127, stdout, stderr: `${stderr}${err.message}` }));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}
