/**
 * An image's filesystem assembled in memory from host files: every entry owned by root
 * unless said otherwise, so the process user (never root) can read but not write it and
 * the image works under readOnlyRootFilesystem.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { LayerEntry } from './oci.ts';

/** A step of an image build that cannot go on: names the step and what is missing. */
export class ImageBuildError extends Error {
  readonly step: string;

  constructor(step: string, detail: string) {
    super(`image build step '${step}' failed: ${detail}`);
    this.step = step;
  }
}

/** The host file at `path`, or an error naming the step and the package that provides it. */
export function requireHostFile(step: string, path: string, provider: string): string {
  if (!existsSync(path)) throw new ImageBuildError(step, `${path} is missing (${provider})`);
  return path;
}

/**
 * Absolute paths of the shared libraries `ldd` resolves for a binary, the loader included;
 * none for a static binary.
 */
export function sharedLibraries(binary: string): string[] {
  let out: string;
  try {
    out = execFileSync('ldd', [binary], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const failure = err as { code?: string; stderr?: string };
    if (failure.stderr?.includes('not a dynamic executable')) return [];
    const detail = failure.code === 'ENOENT' ? 'ldd is not installed (Debian package libc-bin)' : failure.stderr?.trim() || (err as Error).message;
    throw new ImageBuildError('ldd', `${binary}: ${detail}`);
  }
  return out.split('\n').flatMap((line) => {
    const match = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s*\(/.exec(line);
    return match?.[1] ? [match[1]] : [];
  });
}

export class Rootfs {
  readonly #entries = new Map<string, LayerEntry>();

  /**
   * A directory and its missing parents (0755, root). A mode or owner given here replaces
   * the directory's own; without them an existing directory stays as it is.
   */
  dir(path: string, mode?: number, owner?: number): void {
    const parts = path.split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i += 1) {
      const parent = `/${parts.slice(0, i).join('/')}`;
      if (!this.#entries.has(parent)) this.#entries.set(parent, { type: 'dir', path: parent, mode: 0o755 });
    }
    const own = `/${parts.join('/')}`;
    if (own !== '/' && (mode !== undefined || owner !== undefined)) {
      this.#entries.set(own, { type: 'dir', path: own, mode: mode ?? 0o755, uid: owner, gid: owner });
    }
  }

  file(path: string, data: Buffer, mode = 0o644): void {
    this.dir(dirname(path));
    this.#entries.set(path, { type: 'file', path, data, mode });
  }

  symlink(path: string, target: string): void {
    this.dir(dirname(path));
    this.#entries.set(path, { type: 'symlink', path, target });
  }

  /** A host file at the same path (or `as`), its content followed through symlinks. */
  hostFile(source: string, as = source, mode?: number): void {
    this.file(as, readFileSync(source), mode ?? lstatSync(realpathSync(source)).mode & 0o755);
  }

  /** A host folder under `as`: symlinks kept, files executable or not as they were, tests left out. */
  tree(source: string, as: string): void {
    const stat = lstatSync(source);
    if (stat.isSymbolicLink()) this.symlink(as, readlinkSync(source));
    else if (stat.isDirectory()) {
      this.dir(as);
      for (const name of readdirSync(source).sort()) this.tree(join(source, name), `${as}/${name}`);
    } else if (!source.endsWith('.test.ts')) this.file(as, readFileSync(source), stat.mode & 0o111 ? 0o755 : 0o644);
  }

  /** A binary and every shared library `ldd` names, where the loader looks for them. */
  binary(source: string, as: string): void {
    this.hostFile(source, as, 0o755);
    for (const lib of sharedLibraries(source)) if (!this.#entries.has(lib)) this.hostFile(lib, lib, 0o755);
  }

  /** /etc/passwd and /etc/group naming each user, with a group of the same id. */
  users(users: Array<[name: string, id: number]>): void {
    const home = (id: number): string => (id === 0 ? '/root' : '/nonexistent');
    this.file('/etc/passwd', Buffer.from(users.map(([name, id]) => `${name}:x:${id}:${id}:${name}:${home(id)}:/sbin/nologin\n`).join('')));
    this.file('/etc/group', Buffer.from(users.map(([name, id]) => `${name}:x:${id}:\n`).join('')));
  }

  entries(): LayerEntry[] {
    return [...this.#entries.values()];
  }
}
