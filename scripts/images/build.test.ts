import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { IMAGE_RUNTIME, imageContents, PRODUCT_IMAGES, ROOT } from './build.ts';
import { readImage, writeImage } from './oci.ts';

const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');

/** The lines of one Dockerfile stage, `FROM … AS name` up to the next FROM. */
function stage(name: string): string[] {
  const lines = dockerfile.split('\n');
  const start = lines.findIndex((l) => new RegExp(`^FROM \\S+ AS ${name}$`).test(l));
  expect(start, `Dockerfile has no stage ${name}`).toBeGreaterThanOrEqual(0);
  const end = lines.findIndex((l, i) => i > start && l.startsWith('FROM '));
  return lines.slice(start, end < 0 ? undefined : end);
}

const instruction = (lines: string[], name: string): string | undefined =>
  lines.find((l) => l.startsWith(`${name} `))?.slice(name.length + 1).trim();

describe('the Dockerfile and npm run images build the same images', () => {
  it('both take the sources of each image from scripts/images/contents.txt', () => {
    expect(stage('sources').join('\n')).toContain('scripts/images/contents.txt');
    expect(stage('operator').join('\n')).toContain('COPY --from=sources /out/operator/ ./');
    expect(stage('sidecar').join('\n')).toContain('COPY --from=sources /out/sidecar/ ./');
    expect(imageContents('operator')).toEqual(['package.json', 'crds', 'common', 'operator']);
    expect(imageContents('sidecar')).toEqual(['package.json', 'crds', 'common', 'sidecar']);
    for (const path of [...imageContents('operator'), ...imageContents('sidecar')]) expect(existsSync(join(ROOT, path)), path).toBe(true);
  });

  it('the Docker build context admits every listed path', () => {
    const allowed = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n').filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/$/, ''));
    for (const path of new Set([...imageContents('operator'), ...imageContents('sidecar'), 'scripts/images/contents.txt'])) {
      expect(allowed, path).toContain(path);
    }
  });

  it.each(PRODUCT_IMAGES)('%s: same user, entrypoint, command and ports', (image) => {
    const lines = stage(image);
    const runtime = IMAGE_RUNTIME[image];
    expect(instruction(lines, 'USER')).toBe(runtime.user);
    expect(instruction(lines, 'ENTRYPOINT')).toBe(runtime.entrypoint ? JSON.stringify(runtime.entrypoint).replaceAll(',', ', ') : undefined);
    expect(instruction(lines, 'CMD')).toBe(runtime.cmd ? JSON.stringify(runtime.cmd) : undefined);
    expect(instruction(lines, 'EXPOSE')).toBe(runtime.ports.join(' '));
    const workdir = instruction(lines, 'WORKDIR') ?? instruction(stage('runtime'), 'WORKDIR');
    expect(workdir).toBe(runtime.workingDir);
  });
});

describe('OCI archives', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-oci-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string) => writeImage(join(dir, `${name}.tar`), {
    name: 'docker.io/library/t:1', user: '1:1', entrypoint: ['/bin/t'], env: ['A=b'], workingDir: '/w', exposedPorts: [80],
  }, [
    { type: 'file', path: '/bin/t', mode: 0o755, data: Buffer.from('#!/bin/sh\n') },
    { type: 'dir', path: '/bin', mode: 0o755 },
    { type: 'symlink', path: `/${'long-name/'.repeat(12)}link`, target: '/bin/t' },
  ]);

  it('are deterministic: the same entries give the same manifest digest', () => {
    expect(write('a').manifestDigest).toBe(write('b').manifestDigest);
  });

  it('carry the config, the name a runtime resolves, and a layer tar with long names intact', () => {
    const image = readImage(write('c').path);
    expect(image.config.config).toMatchObject({ User: '1:1', Entrypoint: ['/bin/t'], Env: ['A=b'], WorkingDir: '/w', ExposedPorts: { '80/tcp': {} } });
    expect(JSON.stringify(image.index)).toContain('"io.containerd.image.name":"docker.io/library/t:1"');
    const layer = gunzipSync(image.layer).toString('latin1');
    // Sorted: the directory comes before the file in it; the long path travels in a PAX record.
    expect(layer.indexOf('bin/\0')).toBeLessThan(layer.indexOf('bin/t\0'));
    expect(layer).toContain(`path=${'long-name/'.repeat(12)}link`);
  });
});
