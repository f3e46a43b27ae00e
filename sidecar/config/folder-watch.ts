import { type FSWatcher, watch } from 'node:fs';
import { isGatewayOwnFile } from '../resources/yaml-folder.ts';

export interface FolderWatchOptions {
  dir: string;
  /** Quiet time after the last change before `onChange` runs: an editor's save is several events. */
  debounceMs: number;
  /** How long to wait before watching again after the watch failed (the folder removed, say). */
  retryMs: number;
  onChange: () => void;
  onError: (err: Error) => void;
}

export interface FolderWatch {
  close(): void;
}

/**
 * Calls `onChange` once the folder has been quiet for `debounceMs` after any change in
 * it. The folder itself is watched, not its files: editors that save by writing a new
 * file and renaming it over the old one (vim, most IDEs), and mounted ConfigMaps that
 * swap a symlink, replace the file a per-file watch would follow. Every event counts but
 * those of the gateway's own files (its write lock, the files it writes beside their target:
 * the rename into place is an event of the target's name): telling an editor's temporary
 * files from a real change is left to the caller, which compares what it reads with what it
 * has. A watch that fails is reported and set up again after `retryMs`, followed by a change
 * (what happened meanwhile went unseen).
 */
export function watchFolder(options: FolderWatchOptions): FolderWatch {
  let watcher: FSWatcher | undefined;
  let debounce: NodeJS.Timeout | undefined;
  let retry: NodeJS.Timeout | undefined;
  let closed = false;

  const changed = (_event?: string, name?: string | null): void => {
    if (name && isGatewayOwnFile(name)) return;
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      if (!closed) options.onChange();
    }, options.debounceMs);
  };

  const start = (): boolean => {
    try {
      watcher = watch(options.dir, { persistent: false }, changed);
    } catch (err) {
      failed(err as Error);
      return false;
    }
    watcher.on('error', failed);
    return true;
  };

  function failed(err: Error): void {
    watcher?.close();
    watcher = undefined;
    options.onError(err);
    if (closed) return;
    clearTimeout(retry);
    retry = setTimeout(() => {
      if (!closed && start()) changed();
    }, options.retryMs);
  }

  start();
  return {
    close: () => {
      closed = true;
      clearTimeout(debounce);
      clearTimeout(retry);
      watcher?.close();
    },
  };
}
