import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { PortTakenError, stepFailed } from './errors.ts';
import type { ServerProcess } from './procs.ts';

const PORT_TAKEN = /address already in use|bind: address|EADDRINUSE/i;

export interface WaitOptions {
  step: string;
  proc: ServerProcess;
  timeoutMs: number;
  /** Resolves true once the server is ready; errors count as "not yet". */
  ready: () => Promise<boolean>;
}

/**
 * Polls until the server is ready. A server that exits first fails the step, as a
 * PortTakenError when its log says a port was taken (the caller retries elsewhere).
 */
export async function waitReady(opts: WaitOptions): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  for (;;) {
    if (opts.proc.hasExited()) {
      const log = tailOf(opts.proc.logPath);
      if (PORT_TAKEN.test(log)) throw new PortTakenError(`${opts.proc.name} found its port taken`);
      throw stepFailed(opts.step, opts.proc.logPath, `${opts.proc.name} exited before it was ready:\n${log}`);
    }
    if (await opts.ready().catch(() => false)) return;
    if (Date.now() > deadline) {
      await opts.proc.stop(2_000);
      throw stepFailed(opts.step, opts.proc.logPath, `${opts.proc.name} not ready after ${opts.timeoutMs} ms`);
    }
    await sleep(100);
  }
}

export function tailOf(path: string, lines = 15): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}
