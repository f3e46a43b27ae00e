import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const README = join(import.meta.dirname, '..', '..', 'README.md');

/**
 * The shell block of README.md that follows `<!-- journey:NAME -->`. The journey runs these
 * blocks as they are, so the README's install steps are the ones the tests prove.
 */
export function readmeBlock(name: string, readme = readFileSync(README, 'utf8')): string {
  const marker = `<!-- journey:${name} -->`;
  const at = readme.indexOf(marker);
  if (at < 0) throw new Error(`README.md has no ${marker}`);
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(at + marker.length));
  if (!block?.[1]) throw new Error(`README.md has no \`\`\`sh block after ${marker}`);
  return block[1];
}
