import type { GwProcess } from './processes.ts';
import { waitFor } from './wait.ts';

async function httpOk(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  await res.body?.cancel();
  return res.status === 200;
}

/** The last `lines` lines of a process's log, for a failure message. */
export function logTail(proc: GwProcess, lines: number): string {
  try {
    return proc.log().trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Resolves once `url` answers 200; fails early, with the log, if the process exits first. */
export async function waitReady(proc: GwProcess, url: string, timeoutMs: number): Promise<void> {
  await waitFor(`${proc.name} ready at ${url}`, async () => {
    if (proc.hasExited()) throw new Error(`${proc.name} exited before it was ready:\n${logTail(proc, 20)}`);
    return httpOk(url);
  }, timeoutMs).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}\n--- ${proc.name} log ---\n${logTail(proc, 20)}`);
  });
}
