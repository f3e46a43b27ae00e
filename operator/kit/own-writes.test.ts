import { describe, expect, it } from 'vitest';
import { OwnWrites } from './own-writes.ts';

const version = (name: string, resourceVersion: string, namespace = 'ns') => ({ metadata: { namespace, name, resourceVersion } });

describe('OwnWrites', () => {
  it('recognises the version it wrote once, and no other', () => {
    const own = new OwnWrites();
    own.record('Key', version('a', '10'));
    expect(own.take('Key', version('a', '9'))).toBe(false);
    expect(own.take('Secret', version('a', '10'))).toBe(false);
    expect(own.take('Key', version('a', '10', 'other'))).toBe(false);
    expect(own.take('Key', version('a', '10'))).toBe(true);
    expect(own.take('Key', version('a', '10'))).toBe(false);
  });

  it('recognises each of the last versions written of an object, and forgets a deleted one', () => {
    const own = new OwnWrites();
    own.record('Key', version('a', '10'));
    own.record('Key', version('a', '11'));
    expect(own.take('Key', version('a', '10'))).toBe(true);
    expect(own.take('Key', version('a', '11'))).toBe(true);
    for (const rv of ['1', '2', '3', '4', '5']) own.record('Key', version('a', rv));
    expect(own.take('Key', version('a', '1'))).toBe(false);
    expect(own.take('Key', version('a', '5'))).toBe(true);
    own.forget('Key', version('a', '4'));
    expect(own.take('Key', version('a', '4'))).toBe(false);
  });

  it('ignores an answer without a resourceVersion', () => {
    const own = new OwnWrites();
    own.record('Key', { metadata: { namespace: 'ns', name: 'a' } });
    expect(own.take('Key', { metadata: { namespace: 'ns', name: 'a' } })).toBe(false);
  });
});
