import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeImage } from '../../../scripts/images/oci.ts';
import { HarnessStepError } from '../errors.ts';
import { serverDir } from '../procs.ts';
import { COREDNS_IMAGE } from './coredns.ts';

/** The sandbox image containerd's config names (sandbox_image). */
export const PAUSE_IMAGE = 'localhost/pause:local';

const PAUSE_SOURCE = join(import.meta.dirname, 'pause.c');

/**
 * The node's own images, as OCI archives for containerd: the pod sandbox (a static binary
 * from pause.c) and CoreDNS. The product images come from `npm run images`.
 */
export async function testBedImages(bins: { coredns: string }): Promise<string[]> {
  const dir = serverDir('images');
  const pause = join(dir, 'pause');
  try {
    execFileSync('gcc', ['-static', '-Os', '-s', '-o', pause, PAUSE_SOURCE], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    throw new HarnessStepError('build-pause-image', PAUSE_SOURCE, `gcc -static failed: ${(err as Error).message}`);
  }
  const common = { env: ['PATH=/'], workingDir: '/' };
  const passwd = (uid: number): Array<{ type: 'file'; path: string; mode: number; data: Buffer }> => [
    { type: 'file', path: '/etc/passwd', mode: 0o644, data: Buffer.from(`root:x:0:0::/:/sbin/nologin\nnonroot:x:${uid}:${uid}::/:/sbin/nologin\n`) },
    { type: 'file', path: '/etc/group', mode: 0o644, data: Buffer.from(`root:x:0:\nnonroot:x:${uid}:\n`) },
  ];
  const pauseImage = writeImage(join(dir, 'pause.tar'), { ...common, name: PAUSE_IMAGE, user: '65535:65535', entrypoint: ['/pause'] }, [
    { type: 'file', path: '/pause', mode: 0o755, data: readFileSync(pause) },
  ]);
  const corednsImage = writeImage(join(dir, 'coredns.tar'), { ...common, name: COREDNS_IMAGE, user: '65532:65532', entrypoint: ['/coredns'] }, [
    { type: 'dir', path: '/etc', mode: 0o755 },
    ...passwd(65532),
    { type: 'file', path: '/coredns', mode: 0o755, data: readFileSync(bins.coredns) },
  ]);
  return [pauseImage.path, corednsImage.path];
}
