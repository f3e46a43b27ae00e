import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readmeBlock } from '../../../scripts/journey/readme-blocks.ts';
import { parseDockerfile } from './dockerfile.ts';
import { CHART_DIR, findObject, helm, parseManifest } from './helm.ts';

/**
 * README.md's install blocks are what the journey runs (on the node in `npm test`, on kind by
 * scripts/e2e-kind.sh). What kind's run needs Docker for is checked here instead: the blocks
 * parse, the Docker lines build targets the Dockerfile has and the archives `npm run images`
 * writes, and the chart accepts the install block's values under the names the journey uses.
 */

const root = resolve(import.meta.dirname, '../../..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

describe("README.md's install blocks", () => {
  it.each(['images-docker', 'images-no-registry', 'install', 'upgrade', 'uninstall'])('%s is valid bash', (name) => {
    execFileSync('bash', ['-n', '-c', readmeBlock(name, readme)]);
  });

  it('builds with Docker every target the Dockerfile defines for the chart, tagged with the chart version', () => {
    const stages = parseDockerfile(readFileSync(join(root, 'Dockerfile'), 'utf8')).stages.map((s) => s.name);
    const builds = [...readmeBlock('images-docker', readme).matchAll(/docker build --target (\S+)\s+-t gw-(\S+):(\S+) \./g)];
    expect(builds.map((m) => m[1])).toEqual(['operator', 'sidecar', 'redis']);
    for (const [, target, image, tag] of builds) {
      expect(stages).toContain(target);
      expect(image).toBe(target);
      expect(tag).toBe(version);
    }
  });

  it('imports the archives of npm run images without a registry', () => {
    const block = readmeBlock('images-no-registry', readme);
    expect(block).toContain('npm run images');
    expect(block).toMatch(/ctr -n k8s\.io images import "\$image"/);
  });

  it('installs the chart with values it accepts, under the names the journey then uses', async () => {
    const block = readmeBlock('install', readme).replaceAll('\\\n', ' ');
    const sets = [...block.matchAll(/--set '?([^'\s]+)'?/g)].map((m) => m[1] ?? '');
    expect(sets).toContain('gateway.settings.enable_redis_rolling_limiter=true');
    const { stdout } = await helm(['template', 'gw', CHART_DIR, '--namespace', 'gw-system', ...sets.flatMap((s) => ['--set', s])]);
    const objects = parseManifest(stdout);
    expect(findObject(objects, 'Deployment', 'gw-operator').spec.template.spec.containers[0].image).toBe(`gw-operator:${version}`);
    expect(findObject(objects, 'Deployment', 'gw-operator').spec.replicas).toBe(2);
    expect(findObject(objects, 'StatefulSet', 'gw-redis').spec.template.spec.containers[0].image).toBe(`gw-redis:${version}`);
    expect(findObject(objects, 'Service', 'gw-admin').spec.ports[0].port).toBe(8081);
    expect(findObject(objects, 'Secret', 'gw-auth').data['admin-secret']).toBeTruthy();
    expect(findObject(objects, 'ServiceAccount', 'gw-sidecar').metadata.namespace).toBe('demo');
    expect(block).toContain('kubectl apply -n demo -f examples/');
  });

  it('scripts/e2e-kind.sh runs the Docker block and the journey', () => {
    const script = readFileSync(join(root, 'scripts/e2e-kind.sh'), 'utf8');
    execFileSync('bash', ['-n', join(root, 'scripts/e2e-kind.sh')]);
    expect(script).toContain('set -euo pipefail');
    expect(script).toContain("readmeBlock('images-docker')");
    expect(script).toContain('kind load docker-image --name "$cluster" "gw-operator:$version" "gw-sidecar:$version" "gw-redis:$version"');
    expect(script).toContain('scripts/journey/journey.ts');
  });
});
