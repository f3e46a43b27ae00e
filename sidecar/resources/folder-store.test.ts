import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { parse, parseAllDocuments } from 'yaml';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FolderResourceStore } from './folder-store.ts';
import { productOf } from './entries.ts';

const multiDoc = `# shop APIs
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata:
  name: pets # the pet API
spec:
  api_id: pets
  categories: [animals]
  proxy: { listen_path: /pets/, target_url: http://127.0.0.1:9000 }
---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata:
  name: toys
  namespace: shop
spec:
  api_id: toys
  oas: { openapi: 3.0.3, info: { title: Toys, version: '1' }, paths: {} }
  categories: [animals, fun]
---
apiVersion: gw.dev/v1alpha1
kind: Category
metadata:
  name: empty-one
`;

const product = `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: starter
spec:
  id: prod-1
  tags:
    - Name: existing # keep me
`;

describe('FolderResourceStore', () => {
  let dir: string;
  let store: FolderResourceStore;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-folder-'));
    await writeFile(join(dir, 'apis.yaml'), multiDoc);
    await writeFile(join(dir, 'product.yml'), product);
    await writeFile(join(dir, 'notes.txt'), 'apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: {name: ignored}\n');
    await writeFile(join(dir, 'other.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n');
    store = new FolderResourceStore(dir, 'default');
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('lists APIs and categories across every YAML file', async () => {
    expect(await store.listApis()).toEqual([
      { apiId: 'pets', namespace: 'default', name: 'pets', oas: false, categories: ['animals'], createdMs: null },
      { apiId: 'toys', namespace: 'shop', name: 'toys', oas: true, categories: ['animals', 'fun'], createdMs: null },
    ]);
    expect(await store.listCategories()).toEqual([{ namespace: 'default', name: 'empty-one' }]);
  });

  it('deletes one document of a multi-document file and keeps the rest with their comments', async () => {
    expect(await store.deleteApi('toys')).toBe(true);
    const text = await readFile(join(dir, 'apis.yaml'), 'utf8');
    expect(text).toContain('# the pet API');
    expect(parseAllDocuments(text).map((d) => (d.toJS() as { metadata: { name: string } }).metadata.name)).toEqual(['pets', 'empty-one']);
    expect(await store.deleteApi('toys')).toBe(false);
  });

  it('removes a file whose only document is deleted', async () => {
    await writeFile(join(dir, 'solo.yaml'), 'apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: {name: solo}\nspec: {api_id: solo}\n');
    expect(await store.deleteApi('solo')).toBe(true);
    expect(await readdir(dir)).not.toContain('solo.yaml');
  });

  it('adds a tag once, keeping comments', async () => {
    expect(await store.addProductTag('prod-1', 'new')).toBe('added');
    expect(await store.addProductTag('prod-1', 'new')).toBe('exists');
    expect(await store.addProductTag('starter', 'existing')).toBe('exists');
    expect(await store.addProductTag('nope', 'x')).toBeNull();
    const text = await readFile(join(dir, 'product.yml'), 'utf8');
    expect(text).toContain('# keep me');
    expect(parse(text).spec.tags).toEqual([{ Name: 'existing' }, { Name: 'new' }]);
  });

  describe('keeps the user\'s formatting on round trips', () => {
    // Flow maps with and without inner spaces, comments, blank lines, 4-space indentation,
    // quoting and a long line: each kept as written.
    const styled = `# The shop, by hand.

apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: {name: au,   namespace: shop}    # odd spacing stays

spec: {api_id: au, use_keyless: true, proxy: {listen_path: /au/, target_url: 'http://127.0.0.1:9000'}}
---
# the product
apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata: {name: starter}
spec:
    id: prod-s # its id

    tags: [{Name: existing}]
    notes:
        - "first"
        - second, with a very long line that goes on well past eighty columns and must not be folded
---
apiVersion: gw.dev/v1alpha1
kind: ApiDefinition
metadata: { name: zoo }   # padded flow map

spec: { api_id: zoo, categories: [ animals ] }
`;

    beforeEach(async () => {
      await writeFile(join(dir, 'styled.yaml'), styled);
    });

    it('deleting a document leaves every other one byte for byte', async () => {
      const [, product, pets] = styled.split(/(?=^---$)/m);
      expect(await store.deleteApi('au')).toBe(true);
      expect(await readFile(join(dir, 'styled.yaml'), 'utf8')).toBe(`${product}${pets}`);
      expect(await store.deleteApi('zoo')).toBe(true);
      expect(await readFile(join(dir, 'styled.yaml'), 'utf8')).toBe(product);
    });

    it('tagging a product changes only its tags, in the style of its document', async () => {
      expect(await store.addProductTag('prod-s', 'new')).toBe('added');
      expect(await readFile(join(dir, 'styled.yaml'), 'utf8')).toBe(styled.replace('tags: [{Name: existing}]', 'tags: [{Name: existing}, {Name: new}]'));
    });

    it('tagging in a padded style or under a flush block sequence keeps that style', async () => {
      const padded = `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata: { name: padded }
spec: { id: prod-p, tags: [ { Name: a } ] }
`;
      const block = `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: block
spec:
  id: prod-b
  tags:
  - Name: a # first
`;
      await writeFile(join(dir, 'padded.yaml'), padded);
      await writeFile(join(dir, 'block.yaml'), block);
      await store.addProductTag('prod-p', 'b');
      await store.addProductTag('prod-b', 'b');
      expect(await readFile(join(dir, 'padded.yaml'), 'utf8')).toBe(padded.replace('[ { Name: a } ]', '[ { Name: a }, { Name: b } ]'));
      expect(await readFile(join(dir, 'block.yaml'), 'utf8')).toBe(`${block}  - Name: b\n`);
    });
  });

  it('tagging keeps a byte order mark, CRLF line ends, and no blank line before a comment that ends the document', async () => {
    const crlf = '\uFEFF# products\r\napiVersion: gw.dev/v1alpha1\r\nkind: PortalProduct\r\nmetadata:\r\n  name: crlf\r\nspec:\r\n  id: prod-c\r\n  tags:\r\n    - Name: one\r\n# last words\r\n---\r\napiVersion: gw.dev/v1alpha1\r\nkind: Category\r\nmetadata:\r\n  name: cat\r\n';
    await writeFile(join(dir, 'crlf.yaml'), crlf);
    await store.addProductTag('prod-c', 'two');
    expect(await readFile(join(dir, 'crlf.yaml'), 'utf8')).toBe(crlf.replace('    - Name: one\r\n', '    - Name: one\r\n    - Name: two\r\n'));
    const spaced = `${product}\n# after a blank line\n`;
    await writeFile(join(dir, 'product.yml'), spaced);
    await store.addProductTag('prod-1', 'new');
    expect(await readFile(join(dir, 'product.yml'), 'utf8')).toBe(spaced.replace('# keep me\n', '# keep me\n    - Name: new\n'));
  });

  it('tagging adds one line and leaves every other byte: aligned comments, blank lines, a quoted id', async () => {
    const aligned = `apiVersion: gw.dev/v1alpha1
kind: PortalProduct
metadata:
  name: aligned
spec:
  id: 'prod-a'    # aligned comment
  name:   Aligned      # and another

  tags:
    - Name: a     # first
    - {Name: b}   # a flow item last

---
apiVersion: gw.dev/v1alpha1
kind: Category
metadata: {name: cat}
`;
    await writeFile(join(dir, 'aligned.yaml'), aligned);
    expect(await store.addProductTag('prod-a', 'c')).toBe('added');
    // A tag YAML 1.1 reads as a boolean is quoted, in the last item's flow style.
    expect(await store.addProductTag('prod-a', 'yes')).toBe('added');
    const items = '    - {Name: b}   # a flow item last\n    - {Name: c}\n    - {Name: "yes"}\n';
    expect(await readFile(join(dir, 'aligned.yaml'), 'utf8')).toBe(aligned.replace('    - {Name: b}   # a flow item last\n', items));
    const [written] = parseAllDocuments(await readFile(join(dir, 'aligned.yaml'), 'utf8'));
    expect(productOf(written?.toJS())?.tags.map((t) => t.Name)).toEqual(['a', 'b', 'c', 'yes']);
  });

  it('serialises concurrent tag writes so none is lost', async () => {
    await Promise.all(['a', 'b', 'c', 'd'].map((tag) => store.addProductTag('prod-1', tag)));
    const tags = (parse(await readFile(join(dir, 'product.yml'), 'utf8')).spec.tags as { Name: string }[]).map((t) => t.Name);
    expect(tags.sort()).toEqual(['a', 'b', 'c', 'd', 'existing']);
  });

  it('keeps every tag written through two stores of one folder (two gateways) at once', async () => {
    const other = new FolderResourceStore(dir, 'default');
    const tags = Array.from({ length: 20 }, (_, i) => `t${i}`);
    const outcomes = await Promise.allSettled(tags.map((tag, i) => (i % 2 === 0 ? store : other).addProductTag('prod-1', tag)));
    expect(outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : String(outcome.reason)))).toEqual(tags.map(() => 'added'));
    const written = (parse(await readFile(join(dir, 'product.yml'), 'utf8')).spec.tags as { Name: string }[]).map((t) => t.Name);
    expect(written.sort()).toEqual(['existing', ...tags].sort());
    expect(await readdir(dir)).not.toContain('.gw-write.lock');
  });

  it('writes a new Key into its own file and refuses a second of the same name', async () => {
    const key = { namespace: 'default', name: 'key-abc', spec: { key_hash: 'f'.repeat(64), rate: 1, per: 1 } };
    await store.createKey(key);
    const written = parse(await readFile(join(dir, 'key-key-abc.yaml'), 'utf8'));
    expect(written).toEqual({ apiVersion: 'gw.dev/v1alpha1', kind: 'Key', metadata: { name: 'key-abc', namespace: 'default' }, spec: key.spec });
    await expect(store.createKey(key)).rejects.toThrow(/exists/);
  });

  it("writes a Key's meta_data in flow style, so the file stays about the size of the JSON it came as", async () => {
    let nested: unknown = Array.from({ length: 2_000 }, () => 0);
    for (let depth = 0; depth < 60; depth++) nested = [nested, 'yes'];
    const metaData = { flat: Array.from({ length: 20_000 }, () => 0), nested, plain: { on: 'on', text: 'x'.repeat(500), 'two\nlines': 'y\nz', crlf: 'a\r\nb' } };
    const key = { namespace: 'default', name: 'key-meta', spec: { key_hash: 'f'.repeat(64), meta_data: metaData } };
    await store.createKey(key);
    const text = await readFile(join(dir, 'key-key-meta.yaml'), 'utf8');
    // Block style wrote this as 465 kB, a line per item indented by its depth; as JSON it is 45 kB.
    expect(text.length).toBeLessThan(JSON.stringify(key).length * 1.6);
    // On one line, a string's line breaks included.
    expect(text.split('\n').filter((line) => line.includes('meta_data'))).toEqual([expect.stringMatching(/^ {2}meta_data: \{ .* \}$/)]);
    // Read as gw reads it (YAML 1.2) and as kubectl does (1.1): the same values, `on` and `yes` strings.
    expect(parse(text).spec).toEqual(key.spec);
    expect(parse(text, { version: '1.1' }).spec).toEqual(key.spec);
  });

  // A file per run, written and read back through the store: on a busy machine, past the default 5 s.
  it('writes every string of a Key so that gw (YAML 1.2) and kubectl (1.1) read it back as written', async () => {
    // Plain scalars one of the two schemas reads as a number, boolean, null or date, beside any string.
    const scalarLike = fc.constantFrom('0o17', '0o017', '15', '0x1F', '1e3', '.5', '.inf', '-.Inf', '.NaN', '0777', '1_000', '0b11', '12:30', '2001-12-14', '~', 'null', 'Null', 'yes', 'on', 'n', 'True', '+1', '', '<<');
    const text = fc.oneof(scalarLike, fc.string({ maxLength: 12 }));
    let written = 0;
    await fc.assert(
      fc.asyncProperty(text, fc.uniqueArray(text, { maxLength: 4 }), async (alias, words) => {
        const spec = { key_hash: 'f'.repeat(64), alias, tags: words, org_id: alias, apply_policies: words, meta_data: Object.fromEntries(words.map((w) => [w, w])) };
        const name = `key-${written++}`;
        await store.createKey({ namespace: 'default', name, spec });
        const file = await readFile(join(dir, `key-${name}.yaml`), 'utf8');
        expect(parse(file).spec).toEqual(spec);
        expect(parse(file, { version: '1.1' }).spec).toEqual(spec);
      }),
      { numRuns: 100 },
    );
  }, 30_000);

  it('reads a file again once it changes behind the store, and a file that came or went', async () => {
    expect((await store.listApis()).map((a) => a.apiId)).toEqual(['pets', 'toys']);
    await writeFile(join(dir, 'apis.yaml'), multiDoc.replace('api_id: pets', 'api_id: cats'));
    await writeFile(join(dir, 'more.yaml'), 'apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: {name: birds}\nspec: {api_id: birds}\n');
    expect((await store.listApis()).map((a) => a.apiId)).toEqual(['cats', 'toys', 'birds']);
    await rm(join(dir, 'more.yaml'));
    expect((await store.listApis()).map((a) => a.apiId)).toEqual(['cats', 'toys']);
    expect(await store.deleteApi('cats')).toBe(true);
    expect((await store.listApis()).map((a) => a.apiId)).toEqual(['toys']);
  });

  it('fails, rather than answering not found, a delete or tag of what no document has while a file does not parse', async () => {
    await writeFile(join(dir, 'broken.yaml'), 'apiVersion: gw.dev/v1alpha1\nkind: ApiDefinition\nmetadata: {name: hidden}\nspec: [\n');
    await expect(store.deleteApi('hidden')).rejects.toThrow('api_id "hidden" is in no document that parses, and broken.yaml does not parse: it may be there');
    await expect(store.addProductTag('hidden-product', 'x')).rejects.toThrow('product_id "hidden-product" is in no document that parses, and broken.yaml does not parse');
    await expect(store.apisWithId('hidden')).rejects.toThrow('api_id "hidden" is in no document that parses, and broken.yaml does not parse: it may be there');
    // What the documents that parse hold is still found.
    expect(await store.addProductTag('prod-1', 'x')).toBe('added');
    expect((await store.apisWithId('toys')).map((api) => api.name)).toEqual(['toys']);
    // One that parses in a file that does not: what is served is that file's last good version.
    await writeFile(join(dir, 'broken.yaml'), `${multiDoc.replace('api_id: pets', 'api_id: dogs')}---\nspec: [\n`);
    await expect(store.apisWithId('dogs')).rejects.toThrow('api_id "dogs" is in broken.yaml, which does not parse: what is served is its last good version');
    await rm(join(dir, 'broken.yaml'));
    expect(await store.deleteApi('hidden')).toBe(false);
    expect(await store.addProductTag('hidden-product', 'x')).toBeNull();
    expect(await store.apisWithId('hidden')).toEqual([]);
  });

  it('fails a list while a file does not parse: what it holds would be missing', async () => {
    await writeFile(join(dir, 'broken.yaml'), 'apiVersion: gw.dev/v1alpha1\nkind: Category\nmetadata: {name: hidden}\nspec: [\n');
    await expect(store.listApis()).rejects.toThrow('broken.yaml does not parse: an ApiDefinition in it would be missing from the list');
    await expect(store.listCategories()).rejects.toThrow('broken.yaml does not parse: a Category in it would be missing from the list');
    await rm(join(dir, 'broken.yaml'));
    expect((await store.listApis()).map((api) => api.apiId)).toEqual(['pets', 'toys']);
    expect((await store.listCategories()).map((category) => category.name)).toEqual(['empty-one']);
  });

  it('never rewrites a file holding a document that does not parse', async () => {
    await writeFile(join(dir, 'broken.yaml'), `${product.replace('starter', 'b2').replace('prod-1', 'prod-2')}---\nkey: [unclosed\n`);
    await expect(store.addProductTag('prod-2', 'x')).rejects.toThrow(/does not parse/);
    expect(await readFile(join(dir, 'broken.yaml'), 'utf8')).toContain('[unclosed');
  });

  it('fails (does not crash) when the folder is gone', async () => {
    await rm(dir, { recursive: true, force: true });
    await expect(store.listApis()).rejects.toThrow();
    await expect(store.deleteApi('pets')).rejects.toThrow();
  });
});
