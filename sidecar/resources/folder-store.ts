import { basename, join } from 'node:path';
import { Document, isCollection, isSeq, parse, Scalar, visit, type Tags } from 'yaml';
import { apiVersion, kinds } from '../../crds/kinds.ts';
import { PRODUCT_MAX_TAGS } from '../../crds/schemas/portal-product.ts';
import { productNamed } from '../../crds/product-id.ts';
import { apiEntryOf, categoryEntryOf, productOf } from './entries.ts';
import type { ApiEntry, CategoryEntry, NewKey, ResourceStore, TagOutcome } from './types.ts';
import { withFolderLock } from './folder-lock.ts';
import { createFile, documentsOf, editableFile, FileChangedError, readFolder, saveFile, saveFileText, textWithItemAppended, type FoundDoc, type YamlFile } from './yaml-folder.ts';

/**
 * Files gw writes are read by YAML 1.2 (gw) and by YAML 1.1 (`kubectl apply`, where `yes`, `on`
 * or `n` are booleans). Written as YAML 1.1 with 1.2's scalar tags added, every string that
 * either reads as something else (`yes` in 1.1, `0o17` in 1.2) is quoted, and reads the same in both.
 */
const yaml12Scalars = new Document(null, { version: '1.2' }).schema.tags.filter((tag) => !tag.collection);
const readsTheSameInBoth = {
  version: '1.1',
  // Without 1.1's merge tag, which writes any `<<` plain, a `<<` key of meta_data can be quoted
  // (keyFileText) rather than read back by kubectl as a merge.
  customTags: (tags: Tags) => [...tags.filter((tag) => typeof tag === 'string' || tag.tag !== 'tag:yaml.org,2002:merge'), ...yaml12Scalars],
} as const;
/**
 * How many times a write is made again from a fresh read of the folder when its file changed
 * between the read and the write (a hand edit; another gateway, holding a lock taken over from
 * it as left over): past it, the operation fails rather than undo the change.
 */
const WRITE_TRIES = 5;

/**
 * A Key's file text. Its `meta_data` is whatever the caller sent, nested up to the admin body's
 * depth: written in YAML's block style, each item takes a line indented by its depth, which
 * made a 1 MB body of nested lists a 60 MB file (and a 1 MB flat list of numbers 5 MB, over
 * the 4 MiB a config file may hold: a key answered 200 and gone at the next restart). In flow
 * style on one line, as JSON writes it, the text stays within about 1.5 times the body. A
 * string with a line break is double-quoted, its breaks escaped: written plain, it would break
 * the collection around it over several lines.
 */
function keyFileText(resource: object): string {
  const doc = new Document(resource, readsTheSameInBoth);
  const metaData = doc.getIn(['spec', 'meta_data'], true);
  if (isCollection(metaData)) {
    visit(metaData, {
      Collection(_key, node) {
        node.flow = true;
      },
      Scalar(_key, node) {
        // A plain `<<` key is YAML 1.1's merge key.
        if (typeof node.value === 'string' && (/[\n\r]/.test(node.value) || node.value === '<<')) node.type = Scalar.QUOTE_DOUBLE;
      },
    });
  }
  // Without a width, a flow collection stays on one line instead of one indented line per item.
  return doc.toString({ lineWidth: 0 });
}

/** Whether `text`, written plain, reads back as that string in YAML 1.1. */
function plainInYaml11(text: string): boolean {
  try {
    return parse(text, { version: '1.1' }) === text;
  } catch {
    return false;
  }
}

/**
 * Standalone store: the `--config` folder is the "file store" of docs/behaviour.md#api-states. Reads scan every
 * YAML file in it; writes change exactly one file (a new file per created Key, the one
 * document of a tagged product, the removal of a deleted API's document). Documents
 * without `metadata.namespace` belong to `defaultNamespace`.
 */
export class FolderResourceStore implements ResourceStore {
  /**
   * Set by the folder config source: a Key file this store wrote, whose session create-key
   * stored already, before any load of the folder has seen it (sidecar/config/folder-source.ts).
   */
  keyCreated: (keyHash: string) => void = () => undefined;
  readonly namespaces: readonly string[] = [];
  readonly #dir: string;
  readonly #defaultNamespace: string;
  /**
   * Writes of this process run one at a time, each on a fresh read of the folder, and those of
   * every process serving the folder too, under its write lock (folder-lock.ts).
   */
  #queue: Promise<unknown> = Promise.resolve();
  /** api_ids deleted here and not yet released by a reload: the gateway keeps serving them. */
  readonly #deleted = new Set<string>();
  readonly #retainElsewhere: ((apiId: string) => Promise<void>) | undefined;
  /**
   * The folder's files as last read: a file whose text has not changed is not parsed again.
   * Each operation read (and parsed) the whole folder: every Key created in a folder of
   * 5,000 documents cost seconds of parsing (docs/architecture.md#performance).
   */
  #files: ReadonlyMap<string, YamlFile> = new Map();

  /**
   * `retainElsewhere`: other processes that serve this folder (the workers of one gateway)
   * keep serving an API deleted here; it runs before the document goes, so none of them
   * re-reads the folder without it first.
   */
  constructor(dir: string, defaultNamespace: string, retainElsewhere?: (apiId: string) => Promise<void>) {
    this.#dir = dir;
    this.#defaultNamespace = defaultNamespace;
    this.#retainElsewhere = retainElsewhere;
  }

  /**
   * Runs a write alone, holding the folder's write lock, and again from its start (reading the
   * folder afresh) when its file changed under it: a write never undoes what it did not read.
   */
  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const retried = async (): Promise<T> => {
      for (let tries = 1; ; tries++) {
        try {
          return await work();
        } catch (error) {
          if (!(error instanceof FileChangedError) || tries >= WRITE_TRIES) throw error;
        }
      }
    };
    const locked = (): Promise<T> => withFolderLock(this.#dir, retried);
    const run = this.#queue.then(locked, locked);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #documents(kind: string): Promise<FoundDoc[]> {
    const files = await readFolder(this.#dir, this.#files);
    this.#files = new Map(files.map((file) => [file.path, file]));
    return documentsOf(files, kind);
  }

  /**
   * What was looked for is in none of the documents read; if a file of the folder does not
   * parse, it may be there (the gateway may be serving it from that file's last good
   * version), so the operation fails saying so rather than answering that it does not exist.
   */
  #throwIfUnparsed(what: string): void {
    const unparsed = this.#unparsed();
    if (unparsed.length > 0) throw new Error(`${what} is in no document that parses, and ${unparsed.join(', ')} does not parse: it may be there`);
  }

  /** A list leaving out what a file that does not parse holds would answer as gone what the gateway may be serving from it. */
  #throwIfAnyUnparsed(what: string): void {
    const unparsed = this.#unparsed();
    if (unparsed.length > 0) throw new Error(`${unparsed.join(', ')} does not parse: ${what} in it would be missing from the list`);
  }

  #unparsed(): string[] {
    return [...this.#files.values()].filter((file) => file.errors.length > 0).map((file) => basename(file.path));
  }

  async listApis(): Promise<ApiEntry[]> {
    const docs = await this.#documents(kinds.ApiDefinition.kind);
    this.#throwIfAnyUnparsed('an ApiDefinition');
    return docs.map((d) => apiEntryOf(d.object, this.#defaultNamespace)).filter((e): e is ApiEntry => e !== null);
  }

  async listCategories(): Promise<CategoryEntry[]> {
    const docs = await this.#documents(kinds.Category.kind);
    this.#throwIfAnyUnparsed('a Category');
    return docs.map((d) => categoryEntryOf(d.object, this.#defaultNamespace)).filter((e): e is CategoryEntry => e !== null);
  }

  async apisWithId(apiId: string): Promise<ApiEntry[]> {
    const docs = await this.#documents(kinds.ApiDefinition.kind);
    const found = docs.map((d) => ({ file: d.file, api: apiEntryOf(d.object, this.#defaultNamespace) })).filter((d) => d.api?.apiId === apiId);
    if (found.length === 0) this.#throwIfUnparsed(`api_id "${apiId}"`);
    // The gateway serves such a file's last good version, which the document read may not be.
    const unparsed = found.find((d) => d.file.errors.length > 0);
    if (unparsed) throw new Error(`api_id "${apiId}" is in ${basename(unparsed.file.path)}, which does not parse: what is served is its last good version`);
    return found.map((d) => d.api!);
  }

  createKey(key: NewKey): Promise<void> {
    return this.#exclusive(async () => {
      const existing = (await this.#documents(kinds.Key.kind)).some((d) => {
        const meta = d.object.metadata as { name?: unknown; namespace?: unknown } | undefined;
        return meta?.name === key.name && (meta.namespace ?? this.#defaultNamespace) === key.namespace;
      });
      if (existing) throw new Error(`Key ${key.namespace}/${key.name} exists already`);
      const resource = {
        apiVersion,
        kind: kinds.Key.kind,
        metadata: { name: key.name, namespace: key.namespace },
        spec: key.spec,
      };
      await createFile(join(this.#dir, `key-${key.name}.yaml`), keyFileText(resource));
      if (key.spec.key_hash) this.keyCreated(key.spec.key_hash);
    });
  }

  addProductTag(productId: string, tag: string): Promise<TagOutcome | null> {
    return this.#exclusive(async () => {
      const found = productNamed(await this.#documents(kinds.PortalProduct.kind), productId, (d) => productOf(d.object));
      if (!found) {
        this.#throwIfUnparsed(`product_id "${productId}"`);
        return null;
      }
      const { tags: present } = productOf(found.object)!;
      if (present.some((t) => t.Name === tag)) return 'exists';
      if (present.length >= PRODUCT_MAX_TAGS) return 'full';
      const editable = await editableFile(found.file);
      const doc = editable.docs[found.index]!;
      const tags = doc.getIn(['spec', 'tags'], true);
      const node = doc.createNode({ Name: tag });
      // The document is YAML 1.2, which quotes what gw would misread (`0o17`); a tag a YAML 1.1
      // reader (kubectl's) would read as something else (`yes`, `off`) is quoted too; any other
      // keeps the document's style.
      if (!plainInYaml11(tag)) (node.get('Name', true) as Scalar).type = Scalar.QUOTE_DOUBLE;
      const spliced = isSeq(tags) ? textWithItemAppended(editable, tags, node) : null;
      if (spliced !== null) {
        await saveFileText(editable, spliced);
        return 'added';
      }
      if (isSeq(tags)) tags.add(node);
      else doc.setIn(['spec', 'tags'], doc.createNode([node]));
      await saveFile(editable, editable.docs, new Set([doc]));
      return 'added';
    });
  }

  deleteApi(apiId: string): Promise<boolean> {
    // A try that removed documents from one file before another file changed under it did
    // delete the API: the next try, finding no document left, still answers that it did.
    let removedSome = false;
    return this.#exclusive(async () => {
      // Every document claiming the api_id goes: a duplicate left behind would be served under it
      // at the next folder load, before any reload, in place of the API deleted.
      const found = (await this.#documents(kinds.ApiDefinition.kind)).filter((d) => apiEntryOf(d.object, this.#defaultNamespace)?.apiId === apiId);
      if (found.length === 0) {
        if (removedSome) return true;
        this.#throwIfUnparsed(`api_id "${apiId}"`);
        return false;
      }
      await this.#retainElsewhere?.(apiId);
      // Retained before the file changes: a folder load that reads the file in between
      // serves the API on, instead of dropping it until the next load (docs/behaviour.md#api-states).
      const retainedAlready = this.#deleted.has(apiId);
      this.#deleted.add(apiId);
      try {
        for (const docs of Map.groupBy(found, (d) => d.file.path).values()) {
          const indexes = new Set(docs.map((d) => d.index));
          const editable = await editableFile(docs[0]!.file);
          await saveFile(
            editable,
            editable.docs.filter((_, index) => !indexes.has(index)),
          );
          removedSome = true;
        }
      } catch (error) {
        if (!retainedAlready && !removedSome) this.#deleted.delete(apiId);
        throw error;
      }
      return true;
    });
  }

  /** Another process deletes `apiId` from the folder: it is served on here until the next reload too. */
  retain(apiId: string): void {
    this.#deleted.add(apiId);
  }

  /** The APIs deleted through this store since the last reload (the folder source keeps serving them). */
  deletedApiIds(): ReadonlySet<string> {
    return this.#deleted;
  }

  /** The folder holds nothing more of a deleted API: the running gateway's memory is its only copy, released here. */
  async releaseDeleted(): Promise<string[]> {
    const released = [...this.#deleted];
    this.#deleted.clear();
    return released;
  }
}
