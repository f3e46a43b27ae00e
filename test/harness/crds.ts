import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { HarnessStepError } from './errors.ts';
import { runKubectl } from './kubectl.ts';

export const GENERATED_CRDS = join(import.meta.dirname, '..', '..', 'crds', 'generated');

/**
 * Applies every CRD of a folder and waits until each is Established and its objects can be
 * listed. Server-side apply keeps large generated schemas clear of the last-applied
 * annotation's size limit. Returns the number of files applied (0 when the folder does not
 * exist yet).
 */
export async function applyCrds(kubeconfig: string, dir = GENERATED_CRDS): Promise<number> {
  if (!existsSync(dir)) return 0;
  const files = readdirSync(dir).filter((f) => /\.ya?ml$/.test(f));
  if (files.length === 0) return 0;
  const fileArgs = files.flatMap((f) => ['-f', join(dir, f)]);
  try {
    await runKubectl(kubeconfig, ['apply', '--server-side', '--force-conflicts', ...fileArgs]);
    await runKubectl(kubeconfig, ['wait', '--for=condition=Established', '--timeout=60s', ...fileArgs]);
    // An Established CRD's storage may still be initializing: the API server answers its lists
    // and watches 429 for a moment, which kubectl waits out (Retry-After) where a test would fail.
    const resources = files.map((f) => f.replace(/\.ya?ml$/, ''));
    await runKubectl(kubeconfig, ['get', resources.join(','), '--all-namespaces', '-o', 'name', '--request-timeout=60s']);
  } catch (err) {
    throw new HarnessStepError('apply-crds', dir, (err as Error).message);
  }
  return files.length;
}
