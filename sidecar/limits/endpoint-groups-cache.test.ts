import { describe, expect, it } from 'vitest';
import { policy, session } from '../../test/support/compiled-fixtures.ts';
import { effectiveLimits } from './effective-session.ts';

const right = (apiId: string, pattern: string) => ({
  api_id: apiId,
  api_name: apiId,
  limit: null,
  endpoints: [{ path: '/x', pattern, method: 'GET', rate: 2, per: 1 }],
});

describe('key-level endpoint matchers', () => {
  it('are compiled once per policy and API, not again for every re-read session', () => {
    const p = policy('g', { access_rights: { a: right('a', '^/x$'), b: right('b', '^/x$') } });
    const policies = { [p.id]: p };
    const first = effectiveLimits(session({ apply_policies: ['g'] }), 'a', policies).endpointGroups[0]!;
    const reread = effectiveLimits(session({ apply_policies: ['g'] }), 'a', policies).endpointGroups[0]!;
    expect(reread[0]!.regex).toBe(first[0]!.regex);
    const onB = effectiveLimits(session({ apply_policies: ['g'] }), 'b', policies).endpointGroups[0]!;
    expect(onB[0]!.value.scopeId).toBe('default/g#b#GET /x');
  });

  it('follow a new config: a reloaded policy object brings its own matchers', () => {
    const before = policy('g', { access_rights: { a: right('a', '^/x$') } });
    const after = policy('g', { access_rights: { a: right('a', '^/y$') } });
    const s = session({ apply_policies: ['g'] });
    expect(effectiveLimits(s, 'a', { [before.id]: before }).endpointGroups[0]![0]!.regex.test('/x')).toBe(true);
    const reloaded = effectiveLimits(s, 'a', { [after.id]: after }).endpointGroups[0]![0]!.regex;
    expect([reloaded.test('/x'), reloaded.test('/y')]).toEqual([false, true]);
  });
});
