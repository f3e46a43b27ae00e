import { describe, expect, it } from 'vitest';
import type { PolicyStatus } from '../../crds/schemas/index.ts';
import type { GwObject } from './gw-object.ts';
import { nextStatus } from './status.ts';

const obj = (status?: PolicyStatus, generation = 3): GwObject<'Policy'> => ({
  apiVersion: 'gw.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name: 'p', namespace: 'ns', generation },
  spec: { access_rights: {} },
  status,
});

describe('nextStatus', () => {
  const t0 = new Date('2026-01-01T00:00:00Z');
  const t1 = new Date('2026-01-01T00:05:00Z');

  it('writes observedGeneration, the Ready condition and the kind fields', () => {
    const status = nextStatus(obj(), { ready: false, reason: 'MissingApi', message: 'grants api_id x', fields: { apis: [], keys: 0 } }, t0);
    expect(status).toEqual({
      apis: [],
      keys: 0,
      observedGeneration: 3,
      conditions: [
        { type: 'Ready', status: 'False', reason: 'MissingApi', message: 'grants api_id x', observedGeneration: 3, lastTransitionTime: t0.toISOString() },
      ],
    });
  });

  it('returns null when the stored status already says the same', () => {
    const first = nextStatus(obj(), { ready: true, reason: 'Valid', message: 'ok', fields: { keys: 2 } }, t0)!;
    expect(nextStatus(obj(first), { ready: true, reason: 'Valid', message: 'ok', fields: { keys: 2 } }, t1)).toBeNull();
  });

  it('returns null for the same status as the API server returns it: keys sorted, undefined fields absent', () => {
    const first = nextStatus(obj(), { ready: true, reason: 'Valid', message: 'ok', fields: { apis: ['a'], keys: 2 } }, t0)!;
    const sortedKeys = (value: unknown): unknown =>
      Array.isArray(value)
        ? value.map(sortedKeys)
        : value !== null && typeof value === 'object'
          ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => [k, sortedKeys(v)]))
          : value;
    const asServed = JSON.parse(JSON.stringify(sortedKeys(first))) as PolicyStatus;
    expect(JSON.stringify(asServed.conditions)).not.toBe(JSON.stringify(first.conditions));
    expect(nextStatus(obj(asServed), { ready: true, reason: 'Valid', message: 'ok', fields: { apis: ['a'], keys: 2 } }, t1)).toBeNull();
    expect(nextStatus(obj(asServed), { ready: true, reason: 'Valid', message: 'ok', fields: { apis: ['a'], keys: 3 } }, t1)).toMatchObject({ keys: 3 });
  });

  it('keeps lastTransitionTime while the status stays, moves it when the status flips', () => {
    const first = nextStatus(obj(), { ready: true, reason: 'Valid', message: 'ok', fields: {} }, t0)!;
    const sameStatus = nextStatus(obj(first), { ready: true, reason: 'Valid', message: 'other message', fields: {} }, t1)!;
    expect(sameStatus.conditions[0]?.lastTransitionTime).toBe(t0.toISOString());
    const flipped = nextStatus(obj(first), { ready: false, reason: 'Broken', message: 'no', fields: {} }, t1)!;
    expect(flipped.conditions[0]?.lastTransitionTime).toBe(t1.toISOString());
  });

  it('rewrites when only the generation moved', () => {
    const first = nextStatus(obj(undefined, 1), { ready: true, reason: 'Valid', message: 'ok', fields: {} }, t0)!;
    const next = nextStatus(obj(first, 2), { ready: true, reason: 'Valid', message: 'ok', fields: {} }, t1);
    expect(next?.observedGeneration).toBe(2);
  });
});
