import { describe, expect, it } from 'vitest';
import { appliedPolicyIds } from '../../crds/session.ts';
import { policy, session } from '../../test/support/compiled-fixtures.ts';
import { effectiveLimits } from '../limits/effective-session.ts';
import { accessRefusal } from './authenticator.ts';

const gold = policy('gold', {
  rate: { rate: 5, per: 1 },
  quota_max: 100,
  access_rights: { orders: { api_id: 'orders', api_name: 'orders', limit: null, endpoints: [] } },
});
const policies = { [gold.id]: gold };

describe('the legacy apply_policy_id', () => {
  it('brings the policy limits along with the access it grants', () => {
    const legacy = session({ namespace: 'default', apply_policy_id: 'gold', rate: 1000, per: 1 });
    expect(accessRefusal(legacy, 'orders', policies, 0)).toBeNull();
    const limits = effectiveLimits(legacy, 'orders', policies);
    expect(limits.rate).toMatchObject({ rate: { rate: 5, per: 1 }, scopeId: 'default/gold' });
    expect(limits.quota).toMatchObject({ max: 100, renewalSeconds: 0, scopeId: 'default/gold' });
  });

  it('counts once when apply_policies names the same policy', () => {
    const both = session({ namespace: 'team', apply_policies: ['gold', 'silver'], apply_policy_id: 'gold' });
    expect(appliedPolicyIds(both)).toEqual(['team/gold', 'team/silver']);
    expect(appliedPolicyIds(session({ namespace: 'team' }))).toEqual([]);
  });
});
