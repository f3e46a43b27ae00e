import { randomBytes } from 'node:crypto';
import { type BigIntStats, renameSync, statSync, unlinkSync } from 'node:fs';
import { link, lstat, open, readdir, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Composer, Document, isCollection, isMap, isNode, parseAllDocuments, Parser, type Node, type ToStringOptions, type YAMLError, type YAMLSeq } from 'yaml';
import { isRecord } from '../../crds/is-record.ts';
import { apiVersion } from '../../crds/kinds.ts';

/**
 * A folder of resource YAML (`--config DIR`) as documents: every `*.yaml` / `*.yml` file
 * directly in the folder, each possibly holding several `---`-separated documents.
 * Writes keep what the user wrote: a document an edit does not touch keeps its text byte
 * for byte, and an edited one goes through the yaml Document model (comments, blank lines,
 * quoting) written in the style its source uses. Files are replaced atomically (write
 * beside, then rename) so a watcher never reads half a file, and only while they still hold
 * what the edit was built from, so an edit made meanwhile by hand or by another gateway is
 * not undone.
 */

/**
 * A file as read: its text and each document's data. The parsed Documents are not kept:
 * at 5,000 APIs they were half of a gateway's heap, and only an edit needs them
 * (`editableFile` parses the file again for it).
 */
export interface YamlFile {
  path: string;
  /** The file as read: unedited documents are written back from it. */
  text: string;
  /** Each document as plain data, converted once as the file is read (null: not a mapping, or it does not parse). */
  objects: Array<Record<string, unknown> | null>;
  /**
   * The errors of its documents, in order, or the one reason it could not be read at all
   * (`UnreadableFileError`): a file with any is read, never rewritten.
   */
  errors: (YAMLError | UnreadableFileError)[];
}

/**
 * The most a config file may hold. Parsing YAML takes tens of times a file's size in heap
 * (a 60 MB file took 2.25 GB and 11 s of the event loop), so a larger file is refused unread
 * rather than stalling or ending the gateway; a larger folder is split into several files.
 */
export const MAX_FILE_BYTES = 4 * 1024 * 1024;

/** Why an entry of the folder that looks like a config file cannot be used at all. */
export class UnreadableFileError extends Error {}

/** A file system error as a short reason: its code (`ENOENT`), else its message. */
const errnoOf = (err: unknown): string => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

/** A file gone from the folder since its name was listed: it is left out, as if never listed. */
class GoneError extends Error {}

/**
 * The file's text and what its inode said just before it was read; an entry that is no
 * readable regular file, or is over MAX_FILE_BYTES, throws UnreadableFileError, and one no
 * longer there (nor a broken symbolic link under its name) GoneError.
 */
async function readLimited(path: string): Promise<{ text: string; stats: BigIntStats }> {
  let handle;
  try {
    handle = await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && (await lstat(path).catch(() => null)) === null) throw new GoneError(path);
    throw new UnreadableFileError(`cannot be opened (${errnoOf(err)}); a broken symbolic link?`);
  }
  try {
    const stats = await handle.stat({ bigint: true });
    if (!stats.isFile()) throw new UnreadableFileError('is not a regular file');
    if (stats.size > MAX_FILE_BYTES) {
      throw new UnreadableFileError(`holds ${(Number(stats.size) / 1048576).toFixed(1)} MiB, over the ${MAX_FILE_BYTES / 1048576} MiB a config file may hold; split it into several files`);
    }
    return { text: await handle.readFile('utf8'), stats };
  } catch (err) {
    if (err instanceof UnreadableFileError) throw err;
    throw new UnreadableFileError(`cannot be read (${errnoOf(err)})`);
  } finally {
    await handle.close();
  }
}

/** A file parsed again to be edited: its documents, which `saveFile` writes back. */
export interface EditableFile {
  file: YamlFile;
  docs: Document.Parsed[];
}

export interface FoundDoc {
  file: YamlFile;
  index: number;
  object: Record<string, unknown>;
}

const isResourceFile = (name: string): boolean => /\.ya?ml$/.test(name) && !name.startsWith('.');

/**
 * Documents parsed and converted between two turns of the event loop. A folder of 5,000 Keys
 * took 1 to 4 s of parsing in one piece, during which the gateway answered no request and its
 * Redis commands timed out; in pieces this size, each takes a few tens of milliseconds.
 */
export const DOCS_PER_TURN = 100;

/** Every document of `text`, parsed `DOCS_PER_TURN` between two turns of the event loop, each handed to `each` as it comes. */
async function parseInPieces(text: string, each: (doc: Document.Parsed) => void): Promise<void> {
  let parsed = 0;
  for (const doc of new Composer().compose(new Parser().parse(text))) {
    each(doc);
    parsed += 1;
    if (parsed % DOCS_PER_TURN === 0) await nextTurn();
  }
}

/** The file, or null when it went between the listing of the folder and its reading. */
async function readYamlFile(path: string, earlier: YamlFile | undefined): Promise<YamlFile | null> {
  let text: string;
  try {
    ({ text } = await readLimited(path));
  } catch (err) {
    // One entry that cannot be read is that file's problem, not the folder's: the others apply.
    if (err instanceof UnreadableFileError) return { path, text: '', objects: [], errors: [err] };
    if (err instanceof GoneError) return null;
    throw err;
  }
  if (earlier?.text === text) return earlier;
  const objects: YamlFile['objects'] = [];
  let flawed = false;
  await parseInPieces(text, (doc) => {
    objects.push(asObject(doc));
    flawed ||= doc.errors.length > 0 || doc.warnings.length > 0;
  });
  // parseAllDocuments is the same parse, with each error's line and column in its message:
  // the rare file that holds an error is parsed again by it, for messages that point at it
  // (its documents' data is the same).
  const errors = flawed ? [...parseAllDocuments(text)].flatMap((doc) => doc.errors) : [];
  return { path, text, objects, errors };
}

/** `file` parsed again, as it was read, for an edit. */
export async function editableFile(file: YamlFile): Promise<EditableFile> {
  const docs: Document.Parsed[] = [];
  await parseInPieces(file.text, (doc) => docs.push(doc));
  return { file, docs };
}

/**
 * The folder's files, parsed. A file whose text is the same as in `earlier` (by path) is that
 * file as it was parsed then: a folder reloaded because one of its files changed (a Key the
 * admin API wrote, one per file) parses that file alone. Callers must not change what it holds.
 */
export async function readFolder(dir: string, earlier: ReadonlyMap<string, YamlFile> = new Map()): Promise<YamlFile[]> {
  const names = (await readdir(dir)).filter(isResourceFile).sort();
  const files = await Promise.all(
    names.map((name) => {
      const path = join(dir, name);
      return readYamlFile(path, earlier.get(path));
    }),
  );
  return files.filter((file) => file !== null);
}

function asObject(doc: Document.Parsed): Record<string, unknown> | null {
  if (doc.errors.length > 0) return null;
  try {
    const value: unknown = doc.toJS();
    return isRecord(value) ? value : null;
  } catch {
    return null;
  }
}

/** Every gw.dev document of one kind, in file then document order. Unparsable documents are skipped. */
export function documentsOf(files: readonly YamlFile[], kind: string): FoundDoc[] {
  const found: FoundDoc[] = [];
  for (const file of files) {
    file.objects.forEach((object, index) => {
      if (object?.apiVersion === apiVersion && object.kind === kind) found.push({ file, index, object });
    });
  }
  return found;
}

/**
 * Whether a name of the folder is one of the gateway's own files: the write lock
 * (folder-lock.ts) and the files written beside their target. They are hidden, so never
 * read as config, and a change of one is no change of the config.
 */
export const isGatewayOwnFile = (name: string): boolean => name.startsWith('.gw-');

/** A new file beside `path`, holding `text`, to be renamed or linked into place. */
async function writtenBeside(path: string, text: string): Promise<string> {
  const temp = join(dirname(path), `.gw-${randomBytes(6).toString('hex')}.tmp`);
  await writeFile(temp, text, { flag: 'wx' });
  return temp;
}

/** A new file; fails (EEXIST) when one of that name exists. Written beside, then hard-linked into place, so a watcher never sees half of it. */
export async function createFile(path: string, text: string): Promise<void> {
  const temp = await writtenBeside(path, text);
  try {
    await link(temp, path);
  } finally {
    await unlink(temp).catch(() => undefined);
  }
}

/**
 * The file changed or went since it was read: an edit built from that read would undo the
 * change (or bring the file back). The write is not made; the caller reads the folder again
 * and makes its edit on what it finds.
 */
export class FileChangedError extends Error {}

/** Whether two stats of one path are the same file, unchanged: ctime moves on any write or rename onto it. */
const sameVersion = (a: BigIntStats, b: BigIntStats): boolean =>
  a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs;

/**
 * Replaces the file by `text`, or removes it (null), provided it still holds `file.text`, the
 * text the edit was built from; else throws FileChangedError and leaves it as it is. The new
 * text is written beside first, then the file is read again and compared. Its inode's stat,
 * taken as that read opened it, is taken again right before the rename; that stat and the
 * rename are synchronous, so no other work of this process runs between them. What a change
 * can still slip into unseen is the few microseconds between them (and an in-place write
 * after that read that keeps the file's size and falls in the same tick of its timestamps):
 * the file system has no rename that checks first.
 */
async function replaceIfUnchanged(file: YamlFile, text: string | null): Promise<void> {
  const temp = text === null ? null : await writtenBeside(file.path, text);
  try {
    const now = await readLimited(file.path).catch(() => null);
    if (now === null || now.text !== file.text) throw new FileChangedError(`${file.path} changed since it was read`);
    const latest = statSync(file.path, { bigint: true, throwIfNoEntry: false });
    if (latest === undefined || !sameVersion(latest, now.stats)) throw new FileChangedError(`${file.path} changed since it was read`);
    if (temp === null) unlinkSync(file.path);
    else renameSync(temp, file.path);
  } finally {
    if (temp !== null) await unlink(temp).catch(() => undefined);
  }
}

/**
 * The source text of each document of a file, the comments and blank lines before it
 * included, and what follows the last one; joined, they are the file.
 */
function documentTexts({ file, docs }: EditableFile): { texts: string[]; tail: string } {
  let start = 0;
  const texts = docs.map((doc) => {
    const end = doc.range[2];
    const text = file.text.slice(start, end);
    start = end;
    return text;
  });
  return { texts, tail: file.text.slice(start) };
}

/** How many lines use each variant, the more common one winning (ties: the first). */
const moreCommon = <T>(a: [T, number], b: [T, number]): T => (b[1] > a[1] ? b[0] : a[0]);

/**
 * The layout a document's source uses, so that writing it back changes only what was
 * edited: indentation width, whether a block sequence is indented under its key, spaces
 * inside flow collections (`{ a: 1 }` or `{a: 1}`), and no folding of long lines.
 */
export function styleOf(source: string): ToStringOptions {
  const lines = source.split('\n').filter((line) => line.trim() !== '' && !line.trimStart().startsWith('#'));
  const indents = lines.map((line) => line.length - line.trimStart().length).filter((n) => n > 0);
  let seqIndented = 0;
  let seqFlush = 0;
  lines.forEach((line, i) => {
    const key = /^(\s*)[^\s#-][^#]*:\s*(#.*)?$/.exec(lines[i - 1] ?? '');
    const item = /^(\s*)- /.exec(line);
    if (!key || !item) return;
    if (item[1]!.length > key[1]!.length) seqIndented += 1;
    else if (item[1]!.length === key[1]!.length) seqFlush += 1;
  });
  // Flow collections open after a key, an item, another collection or a line start; empty ones say nothing.
  const openings = [...source.matchAll(/(?:^|[:,[{-])\s*[[{]( ?)([^\s\]}])/gm)];
  const padded = openings.filter((m) => m[1] === ' ').length;
  const tight = openings.length - padded;
  return {
    indent: indents.length > 0 ? Math.min(...indents) : 2,
    indentSeq: moreCommon([true, seqIndented], [false, seqFlush]),
    flowCollectionPadding: moreCommon([true, padded], [false, tight]),
    lineWidth: 0,
  };
}

/** Whether a comment's first line (`#…`) follows a blank line in `source`. */
const blankLineBefore = (source: string, commentLine: string): boolean => source.includes(`\n\n${commentLine}`) || source.includes(`\n\r\n${commentLine}`);

/**
 * What serialising a document changes besides its edit, put back as its source had it: a byte
 * order mark, CRLF line ends, and the blank line the serialiser always puts before a comment
 * that ends the document.
 */
function asSourceHadIt(text: string, source: string, trailingComment: string | null | undefined): string {
  let out = text;
  if (trailingComment) {
    const commentLine = `#${trailingComment.split('\n')[0]}`;
    const at = out.lastIndexOf(`\n\n${commentLine}`);
    if (at >= 0 && !blankLineBefore(source, commentLine)) out = out.slice(0, at) + out.slice(at + 1);
  }
  if (source.includes('\r\n')) out = out.replace(/\r?\n/g, '\r\n');
  return source.startsWith('\uFEFF') ? `\uFEFF${out}` : out;
}

/** Where a sequence item's own text ends: a block map's range runs on over its trailing comment and line end. */
function contentEnd(node: Node): number | null {
  if (isMap(node) && !node.flow) {
    const last = node.items.at(-1)?.value;
    return isNode(last) ? contentEnd(last) : null;
  }
  return node.range?.[1] ?? null;
}

/**
 * The file's text with `item` appended to the sequence `seq` of one of its documents, and every
 * other byte as it was: serialising the document would also respace its trailing comments and
 * drop blank lines. In a block sequence the item gets a line of its own after the last one,
 * behind the same dash and indentation; in a flow sequence it follows the last after a comma;
 * either way in the last item's style (block or flow). Null where the last item gives no
 * layout to follow (there is none, or it spreads over several lines): the caller then
 * serialises the document.
 */
export function textWithItemAppended({ file }: EditableFile, seq: YAMLSeq, item: Node): string | null {
  const { text } = file;
  const last = seq.items.at(-1);
  const end = isNode(last) ? contentEnd(last) : null;
  if (!isNode(last) || !last.range || !seq.range || end === null || text.slice(last.range[0], end).includes('\n')) return null;
  const copy = item.clone();
  if (isCollection(copy)) copy.flow = seq.flow === true || (isCollection(last) && last.flow === true);
  const line = new Document(copy).toString(styleOf(text.slice(seq.range[0], seq.range[2]))).trimEnd();
  if (line.includes('\n')) return null;
  if (seq.flow) return `${text.slice(0, end)}, ${line}${text.slice(end)}`;
  const lineStart = text.lastIndexOf('\n', last.range[0] - 1) + 1;
  const prefix = text.slice(lineStart, last.range[0]);
  if (!/^[ \t]*-[ \t]+$/.test(prefix)) return null;
  const eol = text.includes('\r\n') ? '\r\n' : '\n';
  const lineEnd = text.indexOf('\n', end);
  if (lineEnd === -1) return `${text}${eol}${prefix}${line}`;
  return `${text.slice(0, lineEnd + 1)}${prefix}${line}${eol}${text.slice(lineEnd + 1)}`;
}

/** A file holding a document that did not parse is never rewritten: serialising it could lose what the user meant. */
function refuseUnparsed({ file }: EditableFile): void {
  if (file.errors.length > 0) throw new Error(`${file.path} holds a YAML document that does not parse; not rewriting it`);
}

/** Writes a file back as `text` (textWithItemAppended's); FileChangedError when the file changed since it was read. */
export async function saveFileText(editable: EditableFile, text: string): Promise<void> {
  refuseUnparsed(editable);
  await replaceIfUnchanged(editable.file, text);
}

/**
 * Writes a file back as `docs` (its documents, some perhaps left out; none removes the file).
 * Documents not in `edited` are written from the file's own text; edited ones are serialised
 * in their source's style. FileChangedError when the file changed since it was read.
 */
export async function saveFile(editable: EditableFile, docs: readonly Document.Parsed[], edited: ReadonlySet<Document.Parsed> = new Set()): Promise<void> {
  refuseUnparsed(editable);
  if (docs.length === 0) {
    await replaceIfUnchanged(editable.file, null);
    return;
  }
  const { texts, tail } = documentTexts(editable);
  const written = docs.map((doc) => {
    const source = texts[editable.docs.indexOf(doc)] ?? '';
    return edited.has(doc) ? asSourceHadIt(doc.toString(styleOf(source)), source, doc.comment) : source;
  });
  await replaceIfUnchanged(editable.file, written.join('') + tail);
}
