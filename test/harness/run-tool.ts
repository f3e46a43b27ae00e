import { spawn } from 'node:child_process';
import { basename } from 'node:path';

export interface ToolResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface ToolOptions {
  input?: string;
  allowFail?: boolean;
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** Runs a command-line tool to completion; a non-zero exit throws (naming the tool and args) unless allowFail. */
export function runTool(binary: string, args: string[], opts: ToolOptions & { timeoutMs: number }): Promise<ToolResult> {
  const name = basename(binary);
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { stdio: ['pipe', 'pipe', 'pipe'], timeout: opts.timeoutMs, env: opts.env ?? process.env, cwd: opts.cwd });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      const result = { code: code ?? 128, stdout, stderr: signal ? `${stderr}(killed by ${signal})` : stderr };
      if (result.code !== 0 && !opts.allowFail) {
        reject(new Error(`${name} ${args.join(' ')} exited with ${result.code}: ${result.stderr.trim()}`));
      } else {
        resolve(result);
      }
    });
    // A tool may exit without reading its input (EPIPE here); its exit code says how it went.
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}
