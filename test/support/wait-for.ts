import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Polls `probe` until it returns a value other than undefined/null/false, or fails after
 * `timeoutMs` naming what was awaited and the last thing the probe saw or threw.
 */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 30_000, intervalMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== null && value !== false) return value;
      last = value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    await sleep(intervalMs);
  }
}
