/** A Map whose entries vanish at their expiry, like Redis keys with a TTL. */
export class TtlMap<V> {
  readonly #entries = new Map<string, { value: V; expiresAt: number }>();

  get(key: string, nowMs: number): V | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt <= nowMs) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  /** expiresAt Infinity: kept until deleted. */
  set(key: string, value: V, expiresAt: number): void {
    this.#entries.set(key, { value, expiresAt });
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }

  sweep(nowMs: number): void {
    for (const [key, entry] of this.#entries) if (entry.expiresAt <= nowMs) this.#entries.delete(key);
  }

  get size(): number {
    return this.#entries.size;
  }

  clear(): void {
    this.#entries.clear();
  }
}
