import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { bundleEntry } from '../../../scripts/build/bundle.ts';
import { baseImage, execForm, importClosure, inBuildContext, instructionsOf, parseDockerfile, spawnedTools, stageChain } from './dockerfile.ts';

/**
 * The images, checked statically (these machines have no Docker engine): the Dockerfile's
 * stages, user, entry points and health checks, and — what a build would only reveal at
 * run time — that everything the operator and the sidecar load is in their image.
 */

const root = resolve(import.meta.dirname, '../../..');
const dockerfile = parseDockerfile(readFileSync(join(root, 'Dockerfile'), 'utf8'));
const dockerignore = readFileSync(join(root, '.dockerignore'), 'utf8');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
const chartValues = parseYaml(readFileSync(join(root, 'charts/gw/values.yaml'), 'utf8')) as {
  operator: { healthPort: number; webhook: { port: number } };
  admin: { port: number; healthPort: number };
  podSecurityContext: { runAsUser: number };
};

const targets = [
  { name: 'operator', source: 'operator/main.ts', nodeFlags: ['--optimize-for-size'], ports: [chartValues.operator.healthPort, chartValues.operator.webhook.port] },
  { name: 'sidecar', source: 'sidecar/main.ts', nodeFlags: ['--no-allocation-site-pretenuring'], ports: [8080, chartValues.admin.port, chartValues.admin.healthPort] },
] as const;

/** Sources a stage chain copies from the build context (COPY without --from). */
function copiedSources(chain: ReturnType<typeof stageChain>): string[] {
  return instructionsOf(chain, 'COPY')
    .filter((c) => !c.args.includes('--from='))
    .flatMap((c) => c.args.split(/\s+/).filter((a) => !a.startsWith('--')).slice(0, -1))
    .map((src) => src.replace(/\/$/, ''));
}

const build = stageChain(dockerfile, 'build');
/** Whether the build stage copies a checkout path (itself or a folder holding it) from the context. */
const inBuildStage = (path: string): boolean => copiedSources(build).some((src) => path === src || path.startsWith(`${src}/`));

describe('Dockerfile', () => {
  it('is multi-stage: a build stage, a shared runtime, one target per image', () => {
    expect(dockerfile.stages.map((s) => s.name)).toEqual(['build', 'runtime', 'operator', 'sidecar', 'redis']);
    for (const { name } of targets) expect(stageChain(dockerfile, name).map((s) => s.name)).toEqual(['runtime', name]);
  });

  it('builds every stage on Node 24 slim', () => {
    expect(dockerfile.globalArgs.NODE_IMAGE).toBe('node:24-slim');
    for (const stage of ['build', 'operator', 'sidecar']) expect(baseImage(dockerfile, stageChain(dockerfile, stage))).toBe('node:24-slim');
  });

  it('bundles from the dependencies exactly as locked, and each image takes only its bundle', () => {
    expect(copiedSources(build).slice(0, 2)).toEqual(['package.json', 'package-lock.json']);
    const runs = instructionsOf(build, 'RUN').map((r) => r.args);
    expect(runs[0]).toMatch(/^npm ci\b/);
    expect(runs.at(-1)).toBe('node scripts/build/bundle.ts --out /out');
    expect(inBuildStage('scripts/build/bundle.ts')).toBe(true);
    for (const { name } of targets) {
      const chain = stageChain(dockerfile, name);
      expect(instructionsOf(chain, 'RUN').some((r) => /\bnpm\b/.test(r.args)), name).toBe(false);
      expect(copiedSources(chain), name).toEqual([]);
      expect(instructionsOf(chain, 'COPY').map((c) => c.args), name).toEqual([`--from=build /out/${name}/ ./`]);
    }
  });

  it('runs each image as the numeric non-root user the chart runs it as', () => {
    for (const { name } of targets) {
      const chain = stageChain(dockerfile, name);
      const last = chain.at(-1)?.instructions ?? [];
      const userAt = last.findIndex((i) => i.keyword === 'USER');
      expect(userAt, name).toBeGreaterThanOrEqual(0);
      expect(last.slice(userAt + 1).some((i) => i.keyword === 'USER' || i.keyword === 'RUN'), name).toBe(false);
      const [uid, gid] = (last[userAt]?.args ?? '').split(':').map(Number);
      expect(uid, name).toBe(chartValues.podSecurityContext.runAsUser);
      expect(gid, name).toBeGreaterThan(0);
    }
  });

  it('starts node on the bundle of the program\'s entry point', () => {
    for (const { name, source, nodeFlags } of targets) {
      const chain = stageChain(dockerfile, name);
      const entrypoint = execForm(instructionsOf(chain, 'ENTRYPOINT').at(-1));
      // The base image's node, not the node_modules/.bin/node of a development checkout; the
      // bundle lands in the working directory, where the target copies its folder to.
      expect(entrypoint, name).toEqual(['node', ...nodeFlags, `gw-${name}.mjs`]);
      expect(instructionsOf(chain, 'WORKDIR').at(-1)?.args, name).toBe('/app');
      expect(bundleEntry(name, '/out'), name).toBe(`/out/${name}/gw-${name}.mjs`);
      expect(existsSync(join(root, source)), `${source} exists`).toBe(true);
      expect(inBuildStage(source) && inBuildContext(dockerignore, source), name).toBe(true);
    }
  });

  it('exposes the ports the chart uses and health-checks the health port', () => {
    for (const { name, ports } of targets) {
      const chain = stageChain(dockerfile, name);
      const exposed = instructionsOf(chain, 'EXPOSE').flatMap((e) => e.args.split(/\s+/).map(Number));
      expect(exposed.sort(), name).toEqual([...ports].sort());
      const healthcheck = instructionsOf(chain, 'HEALTHCHECK').at(-1)?.args ?? '';
      expect(healthcheck, name).toContain('http://127.0.0.1:8082/healthz');
      expect(healthcheck, name).toMatch(/CMD \["node", "-e", /);
    }
  });

  it('bakes in no secrets', () => {
    const all = dockerfile.stages.flatMap((s) => s.instructions);
    const sensitive = /(SECRET|PASSWORD|TOKEN|API_?KEY|CREDENTIAL)/i;
    for (const i of all.filter((x) => x.keyword === 'ENV' || x.keyword === 'ARG')) expect(i.args, `${i.keyword} ${i.args}`).not.toMatch(sensitive);
    expect(Object.keys(dockerfile.globalArgs).join(' ')).not.toMatch(sensitive);
    expect(all.some((i) => i.keyword === 'ADD'), 'ADD (remote URLs, archives) is not used').toBe(false);
    for (const file of ['.env', '.npmrc', 'key.pem', 'crds/server.key']) expect(inBuildContext(dockerignore, file), file).toBe(false);
  });
});

describe('.dockerignore', () => {
  it('keeps only the sources the build stage bundles, without tests', () => {
    expect(dockerignore.split('\n')).toContain('*');
    for (const path of ['package.json', 'package-lock.json', 'crds/settings.ts', 'common/logger.ts', 'operator/main.ts', 'sidecar/main.ts', 'scripts/build/bundle.ts']) {
      expect(inBuildContext(dockerignore, path), path).toBe(true);
    }
    for (const path of ['test/harness/index.ts', 'crds/settings.test.ts', 'node_modules/zod/package.json', 'charts/gw/values.yaml', '.git/HEAD', 'README.md', 'scripts/images/build.ts']) {
      expect(inBuildContext(dockerignore, path), path).toBe(false);
    }
  });
});

describe.each(targets)('the $name image', ({ name, source }) => {
  const chain = stageChain(dockerfile, name);

  it('is bundled from sources the build stage has, none of them a test', () => {
    const closure = importClosure(root, source);
    expect(closure.missing).toEqual([]);
    expect(closure.files.filter((f) => !inBuildStage(f) || !inBuildContext(dockerignore, f))).toEqual([]);
    expect(closure.files.filter((f) => f.endsWith('.test.ts') || f.startsWith('test/'))).toEqual([]);
  });

  it('loads only production dependencies', () => {
    const { packages } = importClosure(root, source);
    expect(packages.length).toBeGreaterThan(0);
    expect(packages.filter((p) => !(p in pkg.dependencies))).toEqual([]);
  });

  it('has every command-line tool the code starts', () => {
    const { files } = importClosure(root, source);
    const tools = [...new Set(files.flatMap((f) => spawnedTools(readFileSync(join(root, f), 'utf8'))))].filter((t) => t !== 'node');
    const installs = instructionsOf(chain, 'RUN').map((r) => r.args).join('\n');
    for (const tool of tools) expect(installs, `${name} runs ${tool}`).toMatch(new RegExp(`apt-get install[^\\n]*\\b${tool}\\b`));
  });
});
