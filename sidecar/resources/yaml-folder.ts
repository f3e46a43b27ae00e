import { randomBytes } from 'node:crypto';
import { link, readdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { type Document, parseAllDocuments } from 'yaml';
import { apiVersion } from '../../crds/kinds.ts';

/**
 * A folder of resource YAML (`--config DIR`) as documents: every `*.yaml` / `*.yml` file
 * directly in the folder, each possibly holding several `---`-separated documents.
 * Edits go through the yaml Document model so comments and layout the user wrote survive,
 * and files are replaced atomically (write beside, then rename) so a watcher never reads
 * half a file.
 */

export interface YamlFile {
  path: string;
  docs: Document.Parsed[];
}

export interface FoundDoc {
  file: YamlFile;
  index: number;
  object: Record<string, unknown>;
}

const isResourceFile = (name: string): boolean => /\.ya?ml$/.test(name) && !name.startsWith('.');

export async function readFolder(dir: string): Promise<YamlFile[]> {
  const names = (await readdir(dir)).filter(isResourceFile).sort();
  return Promise.all(
    names.map(async (name) => {
      const path = join(dir, name);
      return { path, docs: [...parseAllDocuments(await readFile(path, 'utf8'))] };
    }),
  );
}

function asObject(doc: Document.Parsed): Record<string, unknown> | null {
  if (doc.errors.length > 0) return null;
  try {
    const value: unknown = doc.toJS();
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Every gw.dev document of one kind, in file then document order. Unparsable documents are skipped. */
export function documentsOf(files: readonly YamlFile[], kind: string): FoundDoc[] {
  const found: FoundDoc[] = [];
  for (const file of files) {
    file.docs.forEach((doc, index) => {
      const object = asObject(doc);
      if (object?.apiVersion === apiVersion && object.kind === kind) found.push({ file, index, object });
    });
  }
  return found;
}

/**
 * Writes beside the target then renames (replace) or hard-links (create: fails when the
 * target exists) it into place, so a watcher never sees a half-written file.
 */
async function writeAtomically(path: string, text: string, mode: 'replace' | 'create'): Promise<void> {
  const temp = join(dirname(path), `.gw-${randomBytes(6).toString('hex')}.tmp`);
  await writeFile(temp, text, { flag: 'wx' });
  try {
    if (mode === 'replace') await rename(temp, path);
    else await link(temp, path);
  } finally {
    await unlink(temp).catch(() => undefined);
  }
}

/**
 * Writes a file's documents back. A file holding a document that did not parse is never
 * rewritten: serialising it could lose what the user meant.
 */
export async function saveFile(file: YamlFile, docs: readonly Document.Parsed[]): Promise<void> {
  if (file.docs.some((doc) => doc.errors.length > 0)) {
    throw new Error(`${file.path} holds a YAML document that does not parse; not rewriting it`);
  }
  if (docs.length === 0) {
    await unlink(file.path);
    return;
  }
  await writeAtomically(file.path, docs.map(String).join(''), 'replace');
}

/** A new file; fails when one of that name exists. */
export function createFile(path: string, text: string): Promise<void> {
  return writeAtomically(path, text, 'create');
}
