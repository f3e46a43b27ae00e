import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { tmpdir } from 'node:os';

/** A harness step (build, install, start) that failed: names the step and its log. */
export class HarnessStepError extends Error {
  readonly code = 'HARNESS_STEP_FAILED';
  readonly step: string;
  readonly logPath: string;

  constructor(step: string, logPath: string, detail: string) {
    super(`test harness step '${step}' failed: ${detail}; log: ${logPath}`);
    this.step = step;
    this.logPath = logPath;
  }
}

/** A server could not bind a port another process took after it was picked. */
export class PortTakenError extends Error {
  readonly code = 'PORT_TAKEN';
}

/**
 * The failure of a step whose log lives in a session folder, which is removed when the run
 * ends: the log is copied to a folder that stays, and the error names the copy.
 */
export function stepFailed(step: string, logPath: string, detail: string): HarnessStepError {
  if (!existsSync(logPath)) return new HarnessStepError(step, logPath, detail);
  const keptDir = join(tmpdir(), 'gw-test-logs');
  mkdirSync(keptDir, { recursive: true });
  const kept = join(keptDir, `${step}-${Date.now()}-${process.pid}-${basename(logPath)}`);
  copyFileSync(logPath, kept);
  return new HarnessStepError(step, kept, detail);
}
