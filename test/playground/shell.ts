import { spawn } from 'node:child_process';

export interface ShellResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a script with bash exactly as a user would paste it, with `env` added to this
 * process's environment; killed after `timeoutMs`.
 */
export function runShell(script: string, env: Record<string, string>, timeoutMs = 60_000): Promise<ShellResult> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', (err) => resolve({ code: 127, stdout, stderr: `${stderr}${err.message}` }));
    child.once('close', (code, signal) => resolve({ code: code ?? 128, stdout, stderr: signal ? `${stderr}(killed by ${signal})` : stderr }));
  });
}

/** Single-quotes a value for bash. */
export const quote = (value: string): string => `'${value.replaceAll("'", `'\\''`)}'`;
