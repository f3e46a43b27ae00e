import type { KubernetesObject } from '@kubernetes/client-node';

/**
 * One copy of each string value that many cached objects repeat. JSON.parse gives every
 * object its own copy of each value: with 10,000 Keys the operator's heap held 25,000 copies
 * of the namespace, as many of the apiVersion, 10,000 of the finalizer, of the Ready
 * condition's reason and message, and of each policy a Key names (docs/benchmarks.md#operator).
 * The pool is bounded: when it is full it starts again, so values that never repeat (a
 * timestamp, a changing message) cannot grow it; the objects keep the copies they hold.
 * Values longer than `maxLength` are not pooled, so what the pool alone keeps alive (values
 * of objects since changed or deleted) stays under capacity x maxLength characters.
 */
export class StringPool {
  readonly #pool = new Map<string, string>();
  readonly #capacity: number;
  readonly #maxLength: number;

  constructor(capacity = 4096, maxLength = 256) {
    this.#capacity = capacity;
    this.#maxLength = maxLength;
  }

  /** The pooled copy of `value` (equal to it); `value` itself the first time it is seen, or when too long to pool. */
  intern<S extends string | undefined>(value: S): S {
    if (value === undefined || value.length > this.#maxLength) return value;
    const pooled = this.#pool.get(value);
    if (pooled !== undefined) return pooled as S;
    if (this.#pool.size >= this.#capacity) this.#pool.clear();
    this.#pool.set(value, value);
    return value;
  }

  get size(): number {
    return this.#pool.size;
  }
}

interface Condition {
  type?: string;
  status?: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

type WithStatus = KubernetesObject & { status?: Record<string, unknown> & { conditions?: Condition[] } };

/**
 * Replaces, in place, the values of `object` that repeat across objects by their pooled
 * copies: its apiVersion and kind, its namespace and creation time, finalizers, label
 * values, owner references' kinds, its conditions, and the strings listed directly in
 * status arrays (a Key's policies). Names, uids, versions and hashes are left as they are:
 * each belongs to one object.
 */
export function internRepeatedValues(pool: StringPool, object: WithStatus): void {
  object.apiVersion = pool.intern(object.apiVersion);
  object.kind = pool.intern(object.kind);
  if (object.metadata) internMetadata(pool, object.metadata);
  if (object.status) internStatus(pool, object.status);
}

function internMetadata(pool: StringPool, metadata: NonNullable<KubernetesObject['metadata']>): void {
  metadata.namespace = pool.intern(metadata.namespace);
  // A typed client gives a Date here; only the string a watch of a custom kind gives is pooled.
  if (typeof metadata.creationTimestamp === 'string') metadata.creationTimestamp = pool.intern(metadata.creationTimestamp);
  const { finalizers, labels, ownerReferences } = metadata;
  if (finalizers) internElements(pool, finalizers);
  if (labels) for (const label of Object.keys(labels)) labels[label] = pool.intern(labels[label]!);
  for (const owner of ownerReferences ?? []) {
    owner.apiVersion = pool.intern(owner.apiVersion);
    owner.kind = pool.intern(owner.kind);
  }
}

function internStatus(pool: StringPool, status: NonNullable<WithStatus['status']>): void {
  for (const condition of status.conditions ?? []) {
    condition.type = pool.intern(condition.type);
    condition.status = pool.intern(condition.status);
    condition.reason = pool.intern(condition.reason);
    condition.message = pool.intern(condition.message);
    condition.lastTransitionTime = pool.intern(condition.lastTransitionTime);
  }
  for (const field of Object.keys(status)) {
    const value = status[field];
    if (field !== 'conditions' && Array.isArray(value)) internElements(pool, value);
  }
}

/** The string elements of `values`, pooled in place; other elements are left alone. */
function internElements(pool: StringPool, values: unknown[]): void {
  for (let i = 0; i < values.length; i++) if (typeof values[i] === 'string') values[i] = pool.intern(values[i] as string);
}
