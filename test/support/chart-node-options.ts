import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

const VALUES = new URL('../../charts/gw/values.yaml', import.meta.url);

/**
 * The NODE_OPTIONS the chart ships for the operator (operator.nodeOptions) or for injected
 * sidecars (sidecar.nodeOptions), so the bench and the soak measure what gets installed.
 */
export function chartNodeOptions(component: 'operator' | 'sidecar'): string {
  const values = parse(readFileSync(VALUES, 'utf8')) as Record<typeof component, { nodeOptions?: string }>;
  return values[component].nodeOptions ?? '';
}
