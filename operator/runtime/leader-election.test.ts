import { describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../common/session-store.ts';
import { session } from '../../test/support/compiled-fixtures.ts';
import { LeaseLapsedError } from '../kit/reconciler.ts';
import { leaderOnlySessions } from './leader-election.ts';

describe('leaderOnlySessions', () => {
  it('writes and deletes only while the lease is held, and reads whatever it is', async () => {
    const store = new MemorySessionStore();
    let held = true;
    const fenced = leaderOnlySessions(store, () => held);
    await fenced.put('a', session({ alias: 'a' }));
    held = false;
    await expect(fenced.put('b', session({ alias: 'b' }))).rejects.toBeInstanceOf(LeaseLapsedError);
    await expect(fenced.delete('a')).rejects.toBeInstanceOf(LeaseLapsedError);
    expect(await store.get('b')).toBeNull();
    expect((await fenced.get('a'))?.alias).toBe('a');
    held = true;
    await fenced.delete('a');
    expect(await store.get('a')).toBeNull();
  });
});
