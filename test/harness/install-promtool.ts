import { ensureDebianPackages } from './install-debian.ts';
import { findOnPath } from './which.ts';

const PROMTOOL = '/usr/bin/promtool';

/** Path of promtool (the chart's alert rules are checked with it), installing Debian's prometheus package when it is absent. */
export async function ensurePromtool(): Promise<string> {
  const found = findOnPath('promtool');
  if (found) return found;
  await ensureDebianPackages({ step: 'install-promtool', packages: ['prometheus'], provides: [PROMTOOL] });
  return PROMTOOL;
}
