/**
 * Path prefixes looked up by their exact text. A prefix matches a path when the path is
 * the prefix or continues with `/` right after it, so the only candidates are the path
 * itself and the text before each of its slashes. Lookup probes those, longest first, and
 * stops at the first hit: its cost depends on the path's segments, never on how many
 * prefixes are indexed (the admin gateway serves every API of the cluster).
 */
export class PrefixIndex<T> {
  readonly #byPrefix = new Map<string, T>();
  /** Length of the longest prefix: boundaries further into the path cannot match anything. */
  readonly #longest: number;

  /** The first entry for a prefix wins; later ones with the same prefix are never found. */
  constructor(entries: Iterable<readonly [prefix: string, value: T]>) {
    let longest = -1;
    for (const [prefix, value] of entries) {
      if (this.#byPrefix.has(prefix)) continue;
      this.#byPrefix.set(prefix, value);
      longest = Math.max(longest, prefix.length);
    }
    this.#longest = longest;
  }

  /** The value of the longest prefix that ends at a segment boundary of `path`. */
  find(path: string): T | undefined {
    if (this.#longest < 0) return undefined;
    let end = path.length <= this.#longest ? path.length : path.lastIndexOf('/', this.#longest);
    while (end >= 0) {
      const found = this.#byPrefix.get(path.slice(0, end));
      if (found !== undefined) return found;
      // lastIndexOf would read a negative start as 0 and find the same slash again.
      end = end === 0 ? -1 : path.lastIndexOf('/', end - 1);
    }
    return undefined;
  }
}
