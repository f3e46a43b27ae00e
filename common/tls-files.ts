import { unwatchFile, watchFile } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import type { Logger } from './logger.ts';

/** A certificate (chain) and its private key, PEM. */
export interface TlsMaterial {
  cert: string;
  key: string;
}

/** What every TLS listener accepts: TLS 1.2 and later. */
export const TLS_MIN_VERSION = 'TLSv1.2';

/** The pair cannot be read, or does not form a usable certificate and key. Never carries the key itself. */
export class TlsFilesError extends Error {
  readonly code = 'invalid_tls_files';
}

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** Reads the pair and checks it as the server will use it (a key that does not match the certificate fails here). */
export async function readTlsFiles(certFile: string, keyFile: string): Promise<TlsMaterial> {
  let material: TlsMaterial;
  try {
    const [cert, key] = await Promise.all([readFile(certFile, 'utf8'), readFile(keyFile, 'utf8')]);
    material = { cert, key };
  } catch (error) {
    throw new TlsFilesError(`cannot read the TLS certificate ${certFile} or key ${keyFile}: ${messageOf(error)}`);
  }
  try {
    createSecureContext({ ...material, minVersion: TLS_MIN_VERSION });
  } catch (error) {
    throw new TlsFilesError(`the TLS certificate ${certFile} and key ${keyFile} are not a usable pair: ${messageOf(error)}`);
  }
  return material;
}

/** A server whose certificate can be swapped without a restart (node:https, node:tls). */
interface SecureServer {
  setSecureContext(options: SecureContextOptions): void;
}

/**
 * A certificate and key read from files, served by any number of listeners and followed
 * when the files change: cert-manager renewing a certificate, or an edited Secret, which
 * the kubelet lands in the pod's volume by swapping a symlink. The files are polled
 * (stat), which sees a swapped symlink where a watch of the old file would not. A changed
 * pair that does not load (a key written before its certificate, a bad file) leaves the
 * previous one serving, and says so; the next change tries again.
 */
export class ReloadingTlsFiles {
  readonly #certFile: string;
  readonly #keyFile: string;
  readonly #log: Logger;
  readonly #servers: SecureServer[] = [];
  #material: TlsMaterial;
  #onChange: (() => void) | undefined;
  #reloads: Promise<void> = Promise.resolve();

  private constructor(certFile: string, keyFile: string, material: TlsMaterial, log: Logger) {
    this.#certFile = certFile;
    this.#keyFile = keyFile;
    this.#material = material;
    this.#log = log;
  }

  /** Fails at start (TlsFilesError) when the pair cannot serve: a listener must not come up without it. */
  static async open(certFile: string, keyFile: string, log: Logger): Promise<ReloadingTlsFiles> {
    return new ReloadingTlsFiles(certFile, keyFile, await readTlsFiles(certFile, keyFile), log);
  }

  /** Options for https.createServer: the current pair. */
  serverOptions(): SecureContextOptions {
    return { ...this.#material, minVersion: TLS_MIN_VERSION };
  }

  /** The server gets every later pair too. */
  attach(server: SecureServer): void {
    this.#servers.push(server);
  }

  /** Starts following the files, polling every `pollMs`. */
  watch(pollMs: number): void {
    if (this.#onChange) return;
    const changed = (): void => void this.reload();
    this.#onChange = changed;
    // Not persistent: the polling alone never keeps the process alive.
    watchFile(this.#certFile, { interval: pollMs, persistent: false }, changed);
    watchFile(this.#keyFile, { interval: pollMs, persistent: false }, changed);
  }

  /** Reads the files again and, if they hold a new usable pair, serves it; reloads run one at a time. */
  reload(): Promise<void> {
    this.#reloads = this.#reloads.then(() => this.#reloadNow());
    return this.#reloads;
  }

  async #reloadNow(): Promise<void> {
    let next: TlsMaterial;
    try {
      next = await readTlsFiles(this.#certFile, this.#keyFile);
    } catch (error) {
      this.#log.warn({ err: error }, 'TLS files changed but do not load; the previous certificate is still served');
      return;
    }
    if (next.cert === this.#material.cert && next.key === this.#material.key) return;
    this.#material = next;
    for (const server of this.#servers) server.setSecureContext(this.serverOptions());
    this.#log.info({ cert: this.#certFile }, 'TLS certificate reloaded');
  }

  close(): void {
    if (!this.#onChange) return;
    // Only this instance's listener: another one may follow the same files.
    unwatchFile(this.#certFile, this.#onChange);
    unwatchFile(this.#keyFile, this.#onChange);
    this.#onChange = undefined;
  }
}
