import { spawn } from 'node:child_process';
import { findKubectl } from './bins.ts';

export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface KubectlOptions {
  input?: string;
  allowFail?: boolean;
  timeoutMs?: number;
}

/** kubectl against the given kubeconfig; a non-zero exit throws unless allowFail. */
export function runKubectl(kubeconfig: string, args: string[], opts: KubectlOptions = {}): Promise<KubectlResult> {
  const binary = findKubectl();
  return new Promise((resolve, reject) => {
    const child = spawn(binary, ['--kubeconfig', kubeconfig, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      timeout: opts.timeoutMs ?? 60_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      const result = { code: code ?? 128, stdout, stderr: signal ? `${stderr}(killed by ${signal})` : stderr };
      if (result.code !== 0 && !opts.allowFail) {
        reject(new Error(`kubectl ${args.join(' ')} exited with ${result.code}: ${result.stderr.trim()}`));
      } else {
        resolve(result);
      }
    });
    child.stdin.end(opts.input ?? '');
  });
}
