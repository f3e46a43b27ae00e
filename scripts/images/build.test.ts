import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleEntry, PROGRAMS } from '../build/bundle.ts';
import { IMAGE_RUNTIME, PRODUCT_IMAGES, ROOT } from './build.ts';
import { fullReference, readImage, writeImage, type LayerEntry } from './oci.ts';
import { Rootfs } from './rootfs.ts';
import { archivePath } from './test-bed.ts';

const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');

/** The lines of one Dockerfile stage, `FROM … AS name` up to the next FROM. */
function stage(name: string): string[] {
  const lines = dockerfile.split('\n');
  const start = lines.findIndex((l) => new RegExp(`^FROM \\S+ AS ${name}$`).test(l));
  expect(start, `Dockerfile has no stage ${name}`).toBeGreaterThanOrEqual(0);
  const end = lines.findIndex((l, i) => i > start && l.startsWith('FROM '));
  return lines.slice(start, end < 0 ? undefined : end);
}

/** A stage's lines after those of the stages it is built FROM, as Docker applies them. */
function stageChain(name: string): string[] {
  const lines = stage(name);
  const parent = /^FROM (\S+) AS/.exec(lines[0] ?? '')?.[1] ?? '';
  return dockerfile.includes(`AS ${parent}\n`) ? [...stageChain(parent), ...lines] : lines;
}

const instructions = (lines: string[], name: string): string[] =>
  lines.filter((l) => l.startsWith(`${name} `)).map((l) => l.slice(name.length + 1).trim());
const last = (lines: string[], name: string): string | undefined => instructions(lines, name).at(-1);

describe('the Dockerfile and npm run images build the same images', () => {
  it.each(PROGRAMS)('%s: both copy the folder of the program\'s bundle to the working directory and run its entry module', (program) => {
    expect(stage(program).join('\n')).toContain(`COPY --from=build /out/${program}/ ./`);
    expect(stage('build').join('\n')).toContain('RUN node scripts/build/bundle.ts --out /out');
    const entry = bundleEntry(program, '/out');
    expect(IMAGE_RUNTIME[program].entrypoint?.[0]).toBe('node');
    expect(IMAGE_RUNTIME[program].entrypoint?.at(-1)).toBe(entry.slice(`/out/${program}/`.length));
  });

  it('the bundler is a dev dependency pinned to one version, as the build stage installs it', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string>; scripts: Record<string, string> };
    expect(pkg.devDependencies.rolldown).toMatch(/^\d+\.\d+\.\d+$/);
    expect(pkg.scripts.build).toBe('node scripts/build/bundle.ts');
  });

  it.each(PRODUCT_IMAGES)('%s: same user, entrypoint, command, environment, working directory and ports', (image) => {
    const lines = stageChain(image);
    const runtime = IMAGE_RUNTIME[image];
    expect(last(lines, 'USER')).toBe(runtime.user);
    const exec = (form: string | undefined): unknown => (form === undefined ? undefined : JSON.parse(form));
    expect(exec(last(lines, 'ENTRYPOINT'))).toEqual(runtime.entrypoint);
    expect(exec(last(lines, 'CMD'))).toEqual(runtime.cmd);
    expect(instructions(lines, 'ENV')).toEqual(runtime.env);
    expect(last(lines, 'WORKDIR')).toBe(runtime.workingDir);
    expect(last(lines, 'EXPOSE')).toBe(runtime.ports.join(' '));
  });
});

describe('image names and files', () => {
  it.each([
    ['gw-sidecar:0.1.0', 'docker.io/library/gw-sidecar:0.1.0'],
    ['team/app', 'docker.io/team/app:latest'],
    ['localhost/pause:gw', 'localhost/pause:gw'],
    ['registry.example:5000/gw/gw-operator:1', 'registry.example:5000/gw/gw-operator:1'],
  ])('%s is the full reference %s', (name, reference) => {
    expect(fullReference(name)).toBe(reference);
  });

  it('an archive is named after the image', () => {
    expect(archivePath('/out', 'localhost/coredns:1.12.0')).toBe('/out/coredns-1.12.0.tar');
  });

  it('a directory keeps its owner and mode when files are added under it', () => {
    const fs = new Rootfs();
    fs.dir('/data', 0o750, 999);
    fs.file('/data/dump.rdb', Buffer.from(''));
    expect(fs.entries().filter((e) => e.type === 'dir')).toEqual([{ type: 'dir', path: '/data', mode: 0o750, uid: 999, gid: 999 }]);
  });
});

describe('OCI archives', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-oci-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const entries = (script = '#!/bin/sh\n'): LayerEntry[] => [
    { type: 'file', path: '/bin/t', mode: 0o755, data: Buffer.from(script) },
    { type: 'dir', path: '/bin', mode: 0o755 },
    { type: 'symlink', path: `/${'long-name/'.repeat(12)}link`, target: '/bin/t' },
  ];
  const write = (file: string, script?: string) => writeImage(join(dir, `${file}.tar`), {
    name: 't:1', user: '1:1', entrypoint: ['/bin/t'], env: ['A=b'], workingDir: '/w', exposedPorts: [80],
  }, entries(script));

  it('are deterministic: the same entries give the same manifest digest', () => {
    expect(write('a').manifestDigest).toBe(write('b').manifestDigest);
  });

  it('are left as they are when up to date, and written again when the content changed', () => {
    const first = write('d');
    expect(first.reused).toBe(false);
    expect(write('d')).toEqual({ ...first, reused: true });
    const changed = write('d', '#!/bin/sh\nexit 0\n');
    expect(changed.reused).toBe(false);
    expect(changed.manifestDigest).not.toBe(first.manifestDigest);
  });

  it('carry the config, the full name a runtime resolves, and a layer tar with long names intact', () => {
    const image = readImage(write('c').path);
    expect(image.name).toBe('docker.io/library/t:1');
    expect(image.config.config).toMatchObject({ User: '1:1', Entrypoint: ['/bin/t'], Env: ['A=b'], WorkingDir: '/w', ExposedPorts: { '80/tcp': {} } });
    const layer = gunzipSync(image.layer).toString('latin1');
    // Sorted: the directory comes before the file in it; the long path travels in a PAX record.
    expect(layer.indexOf('bin/\0')).toBeLessThan(layer.indexOf('bin/t\0'));
    expect(layer).toContain(`path=${'long-name/'.repeat(12)}link`);
  });

  it('are rejected when a blob does not match its digest', () => {
    const path = write('e').path;
    const archive = readFileSync(path);
    archive.write('X', archive.indexOf('/bin/t') + 1, 'latin1');
    writeFileSync(path, archive);
    expect(() => readImage(path)).toThrow(/does not match/);
  });
});
