import { join } from 'node:path';
import { buildImageFromBinary, pauseImage } from '../../../scripts/images/test-bed.ts';
import { testBinsDir } from '../bins.ts';
import { COREDNS_IMAGE } from './coredns.ts';

/**
 * The node's own images, as OCI archives for containerd: the pod sandbox and CoreDNS. They
 * are kept beside the cached binaries, and rewritten only when their contents change. The
 * product images come from `npm run images`.
 */
export async function testBedImages(bins: { coredns: string }): Promise<string[]> {
  const out = join(testBinsDir(), 'test-bed-images');
  const pause = pauseImage(out);
  const coredns = buildImageFromBinary(COREDNS_IMAGE, bins.coredns, { out, entrypoint: ['/coredns'] });
  return [pause.path, coredns.path];
}
