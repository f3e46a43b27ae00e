import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseDockerfile } from './dockerfile.ts';
import { CHART_DIR, findObject, helm, parseManifest } from './helm.ts';

/**
 * scripts/e2e-kind.sh needs Docker and kind, so it cannot run here; what can drift without
 * anyone noticing is checked instead: it parses, it builds targets the Dockerfile has, its
 * `--set` values are accepted by the chart, and the names it uses are the chart's names.
 */

const root = resolve(import.meta.dirname, '../../..');
const script = readFileSync(join(root, 'scripts/e2e-kind.sh'), 'utf8');

describe('scripts/e2e-kind.sh', () => {
  it('is valid bash that stops on the first error', () => {
    execFileSync('bash', ['-n', join(root, 'scripts/e2e-kind.sh')]);
    expect(script).toMatch(/^#!\/usr\/bin\/env bash\n/);
    expect(script).toContain('set -euo pipefail');
    expect(script).toContain('trap cleanup EXIT');
  });

  it('builds the targets the Dockerfile defines', () => {
    const stages = parseDockerfile(readFileSync(join(root, 'Dockerfile'), 'utf8')).stages.map((s) => s.name);
    const targets = [...script.matchAll(/docker build --target (\S+)/g)].map((m) => m[1]);
    expect(targets).toEqual(['operator', 'sidecar']);
    for (const target of targets) expect(stages).toContain(target);
  });

  it('installs the chart with values the chart accepts, under the names the script then uses', async () => {
    const sets = [...script.matchAll(/--set (\S+)/g)].map((m) => (m[1] ?? '').replaceAll('"', '').replace('$tag', 'e2e').replace('$app_ns', 'demo'));
    expect(sets.length).toBeGreaterThanOrEqual(4);
    const { stdout } = await helm(['template', 'gw', CHART_DIR, '--namespace', 'gw-system', ...sets.flatMap((s) => ['--set', s])]);
    const objects = parseManifest(stdout);
    expect(findObject(objects, 'Deployment', 'gw-operator').spec.template.spec.containers[0].image).toBe('gw-operator:e2e');
    expect(findObject(objects, 'Service', 'gw-admin').spec.ports[0].port).toBe(8081);
    expect(findObject(objects, 'Secret', 'gw-auth').data['admin-secret']).toBeTruthy();
    expect(findObject(objects, 'ServiceAccount', 'gw-sidecar').metadata.namespace).toBe('demo');
    expect(findObject(objects, 'Role', 'gw-admin').metadata.namespace).toBe('demo');
    expect(script).toContain('service/gw-admin');
    expect(script).toContain('get secret gw-auth');
    expect(script).toContain('serviceAccountName: gw-sidecar');
  });

  it('applies examples that exist and checks the 200, the 429 and the smoothing Events', () => {
    expect(script).toContain('kubectl apply -n "$app_ns" -f "$root/examples/"');
    for (const name of ['keyless-api', 'auth-token-api', 'smoothing']) expect(readFileSync(join(root, 'examples', `${name}.yaml`), 'utf8')).toBeTruthy();
    expect(script).toMatch(/statuses\[0\]\}" == 200/);
    expect(script).toMatch(/statuses\[5\]\}" == 429/);
    expect(script).toContain('--field-selector reason=RateLimitSmoothingUp');
  });
});
