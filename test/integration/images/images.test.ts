/**
 * `npm run images` on this machine: what goes into each archive, and that each image's
 * program starts from its own root filesystem (chroot), so no library is missing.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildImages, IMAGE_RUNTIME, ROOT } from '../../../scripts/images/build.ts';
import { readImage } from '../../../scripts/images/oci.ts';
import { ensureRedisServer } from '../../harness/install-redis.ts';

interface Listed {
  path: string;
  mode: string;
  owner: string;
}

describe('npm run images', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-images-'));
  const rootfs: Record<string, string> = {};
  const listing: Record<string, Listed[]> = {};

  beforeAll(async () => {
    await ensureRedisServer();
    // The production node_modules cache of the checkout's own `npm run images` is reused.
    const written = buildImages({ out: join(ROOT, 'dist', 'images'), tag: 'test', images: ['operator', 'sidecar', 'redis'] });
    for (const image of written) {
      const name = /gw-(\w+):/.exec(image.name)?.[1] as string;
      const layer = join(dir, `${name}.tar.gz`);
      writeFileSync(layer, readImage(image.path).layer);
      rootfs[name] = join(dir, name);
      mkdirSync(rootfs[name]);
      execFileSync('tar', ['-xzf', layer, '-C', rootfs[name]]);
      listing[name] = execFileSync('tar', ['-tvzf', layer], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 }).trim().split('\n').map((line) => {
        const [mode = '', owner = '', , , , ...rest] = line.split(/\s+/);
        return { mode, owner, path: rest.join(' ').replace(/ -> .*$/, '') };
      });
      rmSync(image.path);
    }
  }, 300_000);

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each(['operator', 'sidecar'])('%s: Node 24 and the app start from the image alone', (image) => {
    const root = rootfs[image] as string;
    expect(execFileSync('chroot', [root, '/usr/local/bin/node', '--version'], { encoding: 'utf8' })).toMatch(/^v24\./);
    // The production modules resolve from /app, as the entrypoint will.
    const probe = [
      "const { createRequire } = await import('node:module');",
      "const resolve = createRequire('/app/package.json').resolve;",
      "for (const m of ['ioredis', 'zod', 'pino', '@kubernetes/client-node']) await import(resolve(m));",
      "console.log('ok');",
    ].join(' ');
    expect(execFileSync('chroot', [root, '/usr/local/bin/node', '--input-type=module', '-e', probe], { encoding: 'utf8' }).trim()).toBe('ok');
  });

  it.each(['operator', 'sidecar'])('%s: only production code, owned by root and read-only to the process user', (image) => {
    const paths = (listing[image] ?? []).map((e) => e.path);
    expect(paths).toContain(`app/${image}/main.ts`);
    expect(paths).toContain('app/node_modules/ioredis/package.json');
    expect(paths.filter((p) => p.endsWith('.test.ts'))).toEqual([]);
    for (const dev of ['vitest', 'typescript', 'eslint', 'autocannon']) expect(paths).not.toContain(`app/node_modules/${dev}/package.json`);
    const other = image === 'operator' ? 'sidecar' : 'operator';
    expect(paths.some((p) => p.startsWith(`app/${other}/`))).toBe(false);
    const writable = (listing[image] ?? []).filter((e) => e.path !== 'tmp/' && !e.mode.startsWith('l') && (e.owner !== '0/0' || /^.....w|^........w/.test(e.mode)));
    expect(writable).toEqual([]);
  });

  it('operator: the openssl CLI the webhook uses runs from the image', () => {
    expect(execFileSync('chroot', [rootfs.operator as string, '/usr/bin/openssl', 'version'], { encoding: 'utf8' })).toMatch(/^OpenSSL 3/);
  });

  it('redis: redis-server and redis-cli run from the image, /data belongs to the redis user', () => {
    const root = rootfs.redis as string;
    expect(execFileSync('chroot', [root, '/usr/bin/redis-server', '--version'], { encoding: 'utf8' })).toMatch(/^Redis server v=7/);
    expect(execFileSync('chroot', [root, '/usr/bin/redis-cli', '--version'], { encoding: 'utf8' })).toMatch(/^redis-cli 7/);
    expect(listing.redis?.find((e) => e.path === 'data/')).toMatchObject({ owner: '999/999' });
    expect(IMAGE_RUNTIME.redis.user).toBe('999:999');
  });
});
