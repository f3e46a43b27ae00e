import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { type Document, parseAllDocuments, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiVersion, kinds } from '../../crds/kinds.ts';
import { anyText, fuzzParameters, fuzzTimeout } from '../../test/support/fuzz.ts';
import { FolderResourceStore } from './folder-store.ts';
import { documentsOf, editableFile, readFolder, type YamlFile } from './yaml-folder.ts';

/**
 * The `--config` folder is hand-written: any file content is read without a throw
 * (unparsable documents are skipped), and the store's writes change only what they
 * mean to (a tag of any text lands as written, a deleted API's document goes, every
 * other document reads as before).
 */

const RUNS = 60;

const resource = (kind: string, name: string, spec: Record<string, unknown>) => ({ apiVersion, kind, metadata: { name }, spec });
const api = (id: string) => resource(kinds.ApiDefinition.kind, id, { api_id: id, use_keyless: true, proxy: { listen_path: `/${id}/`, target_url: 'http://127.0.0.1:9' } });
const product = (tags: string[]) => resource(kinds.PortalProduct.kind, 'starter', { id: 'prod-1', tags: tags.map((Name) => ({ Name })) });

/** YAML a person could write: block or flow style, comments, documents of any kind, junk. */
const documentText = fc.oneof(
  fc.tuple(fc.jsonValue({ maxDepth: 3 }), fc.constantFrom(0, 2, 4)).map(([value, flow]) => stringify(value, { indent: flow || 2, collectionStyle: flow === 4 ? 'flow' : 'block' })),
  fc.constantFrom(...Object.values(kinds).map((k) => k.kind)).chain((kind) =>
    fc.dictionary(anyText(10), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }).map((spec) => stringify(resource(kind, 'x', spec))),
  ),
  anyText(60),
  fc.constantFrom('key: [unclosed\n', '\t- tab\n', 'a: &x 1\nb: *y\n', '!!binary foo\n', '? complex\n: key\n', '%YAML 9.9\n---\n', 'a: 1\na: 2\n', '\uFEFFa: 1\n'),
);
const fileText = fc.array(fc.tuple(fc.option(anyText(20).map((c) => `# ${c.replace(/\n/g, ' ')}\n`), { nil: '' }), documentText), { maxLength: 3 }).map((docs) =>
  docs.map(([comment, doc]) => `${comment}${doc}`).join('---\n'),
);

/** Tags as the tag operation lets them through: 1 to 63 characters, well-formed, no control characters. */
const tagName = anyText(40).filter((t) => t.length > 0 && t.length <= 63 && t.isWellFormed() && !/\p{Cc}/u.test(t));

describe('YAML folder loader (fuzz)', () => {
  let root: string;
  const fill = async (contents: Record<string, string>): Promise<string> => {
    const dir = await mkdtemp(join(root, 'f-'));
    for (const [name, text] of Object.entries(contents)) await writeFile(join(dir, name), text);
    return dir;
  };
  const texts = async (dir: string): Promise<Record<string, string>> =>
    Object.fromEntries(await Promise.all((await readdir(dir)).sort().map(async (n) => [n, await readFile(join(dir, n), 'utf8')] as const)));

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'gw-fuzz-yaml-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('reads any folder without a throw, and a read changes no file; while a file does not parse a list fails, and so does an operation on what is absent, which else finds nothing', { timeout: fuzzTimeout(RUNS, 100) }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.dictionary(fc.constantFrom('a.yaml', 'b.yml', 'c.yaml', '.hidden.yaml', 'notes.txt'), fileText, { maxKeys: 3 }), async (contents) => {
        const dir = await fill(contents);
        const files = await readFolder(dir);
        for (const kind of Object.values(kinds)) for (const doc of documentsOf(files, kind.kind)) expect(doc.object.kind).toBe(kind.kind);
        const store = new FolderResourceStore(dir, 'default');
        // Not found; or, when a file does not parse, not known not to be there.
        if (files.some((file) => file.errors.length > 0)) {
          await expect(store.listApis()).rejects.toThrow(/does not parse: an ApiDefinition in it would be missing from the list$/);
          await expect(store.listCategories()).rejects.toThrow(/does not parse: a Category in it would be missing from the list$/);
          await expect(store.apisWithId('absent-api')).rejects.toThrow(/does not parse: it may be there$/);
          await expect(store.deleteApi('absent-api')).rejects.toThrow(/does not parse: it may be there$/);
          await expect(store.addProductTag('absent-product', 'tag')).rejects.toThrow(/does not parse: it may be there$/);
        } else {
          await store.listApis();
          await store.listCategories();
          expect(await store.apisWithId('absent-api')).toEqual([]);
          expect(await store.deleteApi('absent-api')).toBe(false);
          expect(await store.addProductTag('absent-product', 'tag')).toBeNull();
        }
        expect(await texts(dir)).toEqual(contents);
      }),
      fuzzParameters(RUNS),
    );
  });

  it('reads each file as parseAllDocuments does, however many pieces it is parsed in; an unchanged file is not parsed again', { timeout: fuzzTimeout(RUNS, 300) }, async () => {
    // A file as the gateway sees it: each document's data (null when it does not parse or is not a mapping), and its errors' messages.
    const seen = (file: YamlFile) => ({ objects: file.objects, errors: file.errors.map((e) => e.message) });
    const dataOf = (doc: Document.Parsed): unknown => {
      try {
        const value: unknown = doc.errors.length > 0 ? null : doc.toJS();
        return typeof value === 'object' && value !== null && !Array.isArray(value) ? value : null;
      } catch {
        return null;
      }
    };
    const reference = (text: string) => {
      const docs = [...parseAllDocuments(text)];
      return { objects: docs.map(dataOf), errors: docs.flatMap((doc) => doc.errors.map((e) => e.message)) };
    };
    // An edit parses the file again: into the documents parseAllDocuments finds, in the same places.
    const editedAsParsed = async (file: YamlFile) => (await editableFile(file)).docs.map((doc) => doc.range);
    const ranges = (text: string) => [...parseAllDocuments(text)].map((doc) => doc.range);
    await fc.assert(
      fc.asyncProperty(fileText, fc.constantFrom(1, 60), fileText, async (text, repeat, edited) => {
        // Repeated, a file holds more documents than are parsed between two turns of the event loop.
        const big = Array.from({ length: repeat }, () => text).join('---\n');
        const dir = await fill({ 'big.yaml': big, 'small.yaml': 'a: 1\n' });
        const files = await readFolder(dir);
        const bigFile = files.find((f) => f.path.endsWith('big.yaml'))!;
        expect(seen(bigFile)).toEqual(reference(big));
        expect(await editedAsParsed(bigFile)).toEqual(ranges(big));

        await writeFile(join(dir, 'small.yaml'), edited);
        const again = await readFolder(dir, new Map(files.map((f) => [f.path, f])));
        expect(again.find((f) => f.path.endsWith('big.yaml'))).toBe(bigFile);
        const smallFile = again.find((f) => f.path.endsWith('small.yaml'))!;
        expect(smallFile.text).toBe(edited);
        expect(seen(smallFile)).toEqual(reference(edited));
        expect(await editedAsParsed(smallFile)).toEqual(ranges(edited));
      }),
      fuzzParameters(RUNS),
    );
  });

  it('a tag of any text is stored as written, and every other document reads as before', { timeout: fuzzTimeout(RUNS, 100) }, async () => {
    await fc.assert(
      fc.asyncProperty(tagName, fc.uniqueArray(tagName, { maxLength: 2 }), fileText, fc.constantFrom(0, 1), async (tag, existing, other, flow) => {
        const productText = stringify(product(existing), { collectionStyle: flow === 1 ? 'flow' : 'block' });
        const dir = await fill({ 'product.yaml': `# the product\n${productText}---\n${stringify(api('kept'))}`, 'other.yaml': other });
        const before = await readFolder(dir);
        const outcome = await new FolderResourceStore(dir, 'default').addProductTag('prod-1', tag);
        expect(outcome).toBe(existing.includes(tag) ? 'exists' : 'added');
        const docs = parseAllDocuments(await readFile(join(dir, 'product.yaml'), 'utf8'));
        expect(docs.every((d) => d.errors.length === 0)).toBe(true);
        const [tagged, kept] = docs.map((d) => d.toJS() as Record<string, unknown>);
        const tags = existing.includes(tag) ? existing : [...existing, tag];
        expect(tagged).toEqual(product(tags));
        expect(kept).toEqual(api('kept'));
        expect(await readFile(join(dir, 'other.yaml'), 'utf8')).toBe(before.find((f) => f.path.endsWith('other.yaml'))!.text);
      }),
      fuzzParameters(RUNS),
    );
  });

  it('deleting an API removes its document only', { timeout: fuzzTimeout(RUNS, 100) }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(fc.stringMatching(/^[a-z][a-z0-9-]{0,6}$/), { minLength: 1, maxLength: 4 }), fc.nat(), async (ids, which) => {
        const gone = ids[which % ids.length]!;
        const dir = await fill({ 'apis.yaml': ids.map((id) => `# ${id}\n${stringify(api(id))}`).join('---\n') });
        expect(await new FolderResourceStore(dir, 'default').deleteApi(gone)).toBe(true);
        const left = ids.filter((id) => id !== gone);
        const names = await readdir(dir);
        if (left.length === 0) expect(names).toEqual([]);
        else expect(parseAllDocuments(await readFile(join(dir, 'apis.yaml'), 'utf8')).map((d) => d.toJS() as unknown)).toEqual(left.map(api));
      }),
      fuzzParameters(RUNS),
    );
  });
});
