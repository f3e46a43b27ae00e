import { mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { editableFile, FileChangedError, readFolder, saveFile, saveFileText, type EditableFile } from './yaml-folder.ts';

const twoDocs = 'kind: A\nname: first\n---\nkind: B\nname: second\n';

describe('saving a file of the folder', () => {
  let dir: string;
  let path: string;

  /** The file as the folder read gives it, parsed for an edit. */
  const readForEdit = async (): Promise<EditableFile> => editableFile((await readFolder(dir))[0]!);

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-yaml-folder-'));
    path = join(dir, 'docs.yaml');
    await writeFile(path, twoDocs);
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes the edit over the file it was built from', async () => {
    const editable = await readForEdit();
    await saveFileText(editable, twoDocs.replace('first', 'one'));
    expect(await readFile(path, 'utf8')).toBe(twoDocs.replace('first', 'one'));
  });

  it('refuses to write over a file edited in place since it was read, even to the same size, and leaves the edit', async () => {
    const editable = await readForEdit();
    const handEdit = twoDocs.replace('second', 'SECOND');
    await writeFile(path, handEdit);
    await expect(saveFileText(editable, twoDocs.replace('first', 'one'))).rejects.toBeInstanceOf(FileChangedError);
    await expect(saveFile(editable, [editable.docs[0]!])).rejects.toBeInstanceOf(FileChangedError);
    expect(await readFile(path, 'utf8')).toBe(handEdit);
  });

  it('refuses to write over a file an editor saved since it was read (a new file renamed over it)', async () => {
    const editable = await readForEdit();
    const handEdit = `${twoDocs}# saved by hand\n`;
    await writeFile(`${path}.swp`, handEdit);
    await rename(`${path}.swp`, path);
    await expect(saveFileText(editable, twoDocs.replace('first', 'one'))).rejects.toBeInstanceOf(FileChangedError);
    expect(await readFile(path, 'utf8')).toBe(handEdit);
  });

  it('does not bring back a file deleted since it was read, nor remove one that changed', async () => {
    const editable = await readForEdit();
    await rm(path);
    await expect(saveFileText(editable, twoDocs.replace('first', 'one'))).rejects.toBeInstanceOf(FileChangedError);
    await expect(saveFile(editable, editable.docs)).rejects.toBeInstanceOf(FileChangedError);
    expect(await readFolder(dir)).toEqual([]);

    await writeFile(path, twoDocs);
    const again = await readForEdit();
    await writeFile(path, `${twoDocs}---\nkind: C\n`);
    await expect(saveFile(again, [])).rejects.toBeInstanceOf(FileChangedError);
    expect(await readFile(path, 'utf8')).toBe(`${twoDocs}---\nkind: C\n`);
  });

  it('leaves no file of its own beside the target, written or refused', async () => {
    const editable = await readForEdit();
    await saveFile(editable, [editable.docs[1]!]);
    await expect(saveFileText(editable, 'kind: X\n')).rejects.toBeInstanceOf(FileChangedError);
    expect(await readdir(dir)).toEqual(['docs.yaml']);
  });
});
