import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Full path of a command on PATH, if any. */
export function findOnPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, command))) return join(dir, command);
  }
  return undefined;
}
