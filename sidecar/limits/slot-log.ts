const MIN_CAPACITY = 16;

/**
 * The slots a stream rate-limit resource has given, in time order: each one's id and start
 * (Date.now() ms). Held in two Float64Arrays rather than an object per slot, because a
 * resource of a long interval keeps every slot given in it: an object each costs about 80
 * bytes of V8's heap, whose old space the sidecar caps (README, `sidecar.nodeOptions`), where
 * this costs 16 bytes outside it.
 */
export class SlotLog {
  #ids = new Float64Array(MIN_CAPACITY);
  #starts = new Float64Array(MIN_CAPACITY);
  /** Where the first slot is in the arrays: dropping the oldest slots only moves it. */
  #head = 0;
  #length = 0;

  get length(): number {
    return this.#length;
  }

  idAt(index: number): number {
    return this.#ids[this.#head + index]!;
  }

  startAt(index: number): number {
    return this.#starts[this.#head + index]!;
  }

  setStart(index: number, startMs: number): void {
    this.#starts[this.#head + index] = startMs;
  }

  push(id: number, startMs: number): void {
    if (this.#head + this.#length === this.#ids.length) this.#makeRoom();
    this.#ids[this.#head + this.#length] = id;
    this.#starts[this.#head + this.#length] = startMs;
    this.#length += 1;
  }

  /** The index of the slot `id` names, or -1; searched from the newest, where slots given back mostly are. */
  indexOf(id: number): number {
    for (let i = this.#length - 1; i >= 0; i -= 1) if (this.#ids[this.#head + i] === id) return i;
    return -1;
  }

  removeAt(index: number): void {
    const at = this.#head + index;
    const end = this.#head + this.#length;
    this.#ids.copyWithin(at, at + 1, end);
    this.#starts.copyWithin(at, at + 1, end);
    this.#length -= 1;
  }

  dropFirst(count: number): void {
    this.#head += count;
    this.#length -= count;
    if (this.#length === 0) this.#head = 0;
  }

  clear(): void {
    this.#head = 0;
    this.#length = 0;
  }

  /**
   * Moves the slots to the arrays' start: into arrays twice the size once they are more than
   * half full, half the size once under a quarter full (a burst's room is given back).
   */
  #makeRoom(): void {
    const capacity = this.#ids.length;
    const size = this.#length * 2 > capacity ? capacity * 2 : this.#length * 4 < capacity && capacity > MIN_CAPACITY ? capacity / 2 : capacity;
    this.#ids = resized(this.#ids, this.#head, this.#length, size);
    this.#starts = resized(this.#starts, this.#head, this.#length, size);
    this.#head = 0;
  }
}

/** `length` values from `head` on, at the start of an array of `size` (the same one when its size is right). */
function resized(values: Float64Array<ArrayBuffer>, head: number, length: number, size: number): Float64Array<ArrayBuffer> {
  if (size === values.length) return values.copyWithin(0, head, head + length);
  const next = new Float64Array(size);
  next.set(values.subarray(head, head + length));
  return next;
}
