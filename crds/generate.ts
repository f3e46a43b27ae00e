import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { crdDirs, renderCrds } from './openapi/crd.ts';
import { kindSources } from './schemas/index.ts';

/** `npm run generate`: writes the CRD YAML into both places it is committed. */
const root = join(import.meta.dirname, '..');
for (const dir of crdDirs) {
  mkdirSync(join(root, dir), { recursive: true });
  for (const [file, text] of renderCrds(kindSources)) writeFileSync(join(root, dir, file), text);
}
console.log(`wrote ${kindSources.length} CRDs to ${crdDirs.join(' and ')}`);
