import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './processes.ts';
import { waitFor } from './wait.ts';
import { isReady } from '../../support/ready.ts';

export const EXAMPLES_DIR = join(REPO_ROOT, 'examples');

/** The upstream every example names; a local run points it at its own upstream instead. */
export const EXAMPLE_UPSTREAM = 'http://127.0.0.1:9000';

/** The example files, in name order. */
function exampleFiles(): string[] {
  return readdirSync(EXAMPLES_DIR)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => join(EXAMPLES_DIR, f));
}

/**
 * The examples as one multi-document manifest with their upstream replaced, so a run
 * never depends on port 9000 being free. Nothing else of the examples changes.
 */
export function examplesManifest(upstreamUrl: string): string {
  return exampleFiles()
    .map((file) => readFileSync(file, 'utf8').replaceAll(EXAMPLE_UPSTREAM, upstreamUrl).trimEnd())
    .join('\n---\n');
}

/** The api_ids the examples define, for a sidecar that serves them all. */
export const EXAMPLE_API_IDS = ['auth-token-api', 'billing-api', 'keyless-api', 'oas-api', 'stream-limited-api'] as const;

/** What `kubectl get … -o json` returns, as far as the wait reads it. */
export interface ResourceList {
  items: { status?: { conditions?: { type: string; status: string }[] } }[];
}

/**
 * Waits until every example API is Ready and compiled into its ConfigMap. `getJson` runs
 * `kubectl get <args> -o json` in the examples' namespace.
 */
export async function waitForExamples(getJson: (args: string[]) => Promise<ResourceList>, timeoutMs = 60_000): Promise<void> {
  await waitFor('every example ApiDefinition Ready with its ConfigMap', async () => {
    const apis = (await getJson(['apidefinitions'])).items;
    const ready = apis.filter(isReady);
    if (ready.length !== EXAMPLE_API_IDS.length) return false;
    const maps = (await getJson(['configmaps', '-l', 'app.kubernetes.io/managed-by=gw-operator'])).items;
    return maps.length === EXAMPLE_API_IDS.length;
  }, timeoutMs);
}
