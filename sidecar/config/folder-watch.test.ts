import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { watchFolder, type FolderWatch } from './folder-watch.ts';

describe('watching the config folder', () => {
  let dir: string;
  let watch: FolderWatch | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'gw-folder-watch-'));
  });

  afterEach(async () => {
    watch?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("sees no change in the gateway's own files (its write lock, a file written beside its target), and the file renamed into place", async () => {
    let changes = 0;
    watch = watchFolder({ dir, debounceMs: 20, retryMs: 1000, onChange: () => (changes += 1), onError: () => undefined });
    await writeFile(join(dir, '.gw-write.lock'), '{}');
    await writeFile(join(dir, '.gw-write.lock.takeover'), '{}');
    await writeFile(join(dir, '.gw-0123456789ab.tmp'), 'kind: A\n');
    await rm(join(dir, '.gw-write.lock'));
    await sleep(200);
    expect(changes).toBe(0);
    await rename(join(dir, '.gw-0123456789ab.tmp'), join(dir, 'a.yaml'));
    for (let waited = 0; changes === 0 && waited < 2000; waited += 20) await sleep(20);
    expect(changes).toBe(1);
  });
});
