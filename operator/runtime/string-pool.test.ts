import { getHeapSnapshot } from 'node:v8';
import type { KubernetesObject } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { internRepeatedValues, StringPool } from './string-pool.ts';

/** How many distinct string objects on the heap hold exactly `value` (equal strings are not observable from JavaScript). */
async function copiesOnHeap(value: string): Promise<number> {
  const chunks: Buffer[] = [];
  for await (const chunk of getHeapSnapshot()) chunks.push(chunk as Buffer);
  const snapshot = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snapshot.snapshot.meta.node_fields;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const stringType = snapshot.snapshot.meta.node_types[0].indexOf('string');
  let copies = 0;
  for (let i = 0; i < snapshot.nodes.length; i += fields.length) {
    if (snapshot.nodes[i + typeAt] === stringType && snapshot.strings[snapshot.nodes[i + nameAt]!] === value) copies++;
  }
  return copies;
}

type Cached = KubernetesObject & { status?: { conditions?: Array<Record<string, string>>; policies?: string[]; key_hash?: string } };

/** A Key as a watch event delivers it: its own copy of every value, as JSON.parse makes them. */
function parsedKey(i: number, namespace: string, message: string): Cached {
  return JSON.parse(
    JSON.stringify({
      apiVersion: 'gw.dev/v1alpha1',
      kind: 'Key',
      metadata: { name: `key-${i}`, namespace, uid: `uid-${i}`, finalizers: ['gw.dev/key-session'], labels: { team: 'payments' } },
      status: { key_hash: `hash-${i}`, policies: [`${namespace}/gold`], conditions: [{ type: 'Ready', status: 'True', reason: 'SessionStored', message }] },
    }),
  ) as Cached;
}

describe('StringPool', () => {
  it('returns an equal value and stays within its capacity, starting again when full', () => {
    const pool = new StringPool(3);
    expect(pool.intern('a')).toBe('a');
    expect(pool.intern(undefined)).toBeUndefined();
    pool.intern('b');
    pool.intern('c');
    expect(pool.size).toBe(3);
    pool.intern('a');
    expect(pool.size).toBe(3);
    pool.intern('d');
    expect(pool.size).toBe(1);
  });

  it('does not pool values longer than its maximum length', () => {
    const pool = new StringPool(10, 8);
    expect(pool.intern('x'.repeat(9))).toBe('x'.repeat(9));
    expect(pool.size).toBe(0);
    pool.intern('x'.repeat(8));
    expect(pool.size).toBe(1);
  });

  it('leaves every value as it was and names, uids and hashes out of the pool', () => {
    const pool = new StringPool();
    const key = parsedKey(7, 'shop', 'session stored');
    const before = structuredClone(key);
    internRepeatedValues(pool, key);
    expect(key).toEqual(before);
    // apiVersion, kind, namespace, finalizer, label, policy, and the condition's four values.
    expect(pool.size).toBe(10);
  });

  it('keeps one copy of a value that a thousand parsed objects repeat', async () => {
    // Long and built at run time, so V8 holds no copy of it in this file's code.
    const namespace = ['team', 'payments', 'production', 'europe', 'west'].join('-').repeat(3);
    const message = ['session', 'stored', 'in', 'redis'].join(' ').repeat(3);
    const pooled = Array.from({ length: 1000 }, (_, i) => parsedKey(i, namespace, message));
    const pool = new StringPool();
    for (const key of pooled) internRepeatedValues(pool, key);
    expect(await copiesOnHeap(message)).toBeLessThanOrEqual(2);
    expect(await copiesOnHeap(`${namespace}/gold`)).toBeLessThanOrEqual(2);

    const unpooled = Array.from({ length: 1000 }, (_, i) => parsedKey(i, namespace, message));
    expect(await copiesOnHeap(message)).toBeGreaterThanOrEqual(1000);
    expect(pooled.length + unpooled.length).toBe(2000);
  });
});
