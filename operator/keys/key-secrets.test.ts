import type { V1Secret } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { keyHash } from '../../crds/key-hash.ts';
import { hashOfSecret, KEY_DATA, KEY_LABEL, keepOnlyKeyHash } from './key-secrets.ts';

const secret = (labels: Record<string, string>, raw: string): V1Secret => ({
  metadata: {
    name: 'gw-key-a',
    namespace: 'ns',
    labels,
    creationTimestamp: new Date('2026-01-01T00:00:00Z'),
    ownerReferences: [{ apiVersion: 'gw.dev/v1alpha1', kind: 'Key', name: 'a', uid: 'uid-a', controller: true }],
  },
  data: { [KEY_DATA]: Buffer.from(raw).toString('base64') },
});

describe('Key Secrets in the informer cache', () => {
  it('keep only the hash of their raw key: the data leaves the operator\'s memory, the hash stays readable', () => {
    const cached = secret({ [KEY_LABEL]: 'a' }, 'raw-key-of-a');
    keepOnlyKeyHash(cached);
    expect(cached.data).toBeUndefined();
    expect(JSON.stringify(cached)).not.toContain(Buffer.from('raw-key-of-a').toString('base64'));
    expect(hashOfSecret(cached)).toBe(keyHash('raw-key-of-a'));
    // What the Key controller reads stays: the name and the label naming the Key.
    expect(cached.metadata).toEqual({ name: 'gw-key-a', namespace: 'ns', labels: { [KEY_LABEL]: 'a' }, ownerReferences: undefined, creationTimestamp: undefined });
  });

  it('leave other Secrets as they are, and a Key Secret without a key still has no hash', () => {
    const other = secret({}, 'tls material');
    keepOnlyKeyHash(other);
    expect(other.data).toEqual({ [KEY_DATA]: Buffer.from('tls material').toString('base64') });
    expect(other.metadata?.ownerReferences).toHaveLength(1);
    const empty: V1Secret = { metadata: { name: 'gw-key-b', labels: { [KEY_LABEL]: 'b' } }, data: {} };
    keepOnlyKeyHash(empty);
    expect(hashOfSecret(empty)).toBeUndefined();
  });
});
