/**
 * A node to work with by hand:   npm run node:up [-- IMAGE.tar ...]
 * Brings up the test bed's single-node cluster with the test-bed images (and any archives
 * named), prints how to reach it, and removes all of it on Ctrl-C.
 */
import { ensureBins } from '../bins.ts';
import { testBedImages } from './images.ts';
import { startNode } from './node.ts';

const bins = await ensureBins();
const images = [...(await testBedImages(bins)), ...process.argv.slice(2)];
const node = await startNode(bins, { images });
for (const [step, seconds] of node.timings) process.stdout.write(`${seconds.toFixed(1).padStart(6)} s  ${step}\n`);
process.stdout.write(`
node ${node.name} is up in network namespace ${node.netns}
  ${node.nsenter.join(' ')} kubectl --kubeconfig ${node.kubeconfig} get pods -A
Ctrl-C removes it.
`);
// The node's processes are not this process's handles: keep it alive until a signal.
const keepAlive = setInterval(() => undefined, 60_000);
await new Promise<void>((resolve) => {
  process.once('SIGINT', resolve);
  process.once('SIGTERM', resolve);
});
clearInterval(keepAlive);
await node.stop();
