import { describe, expect, it } from 'vitest';
import { enqueuedBy, fakeContext } from './fakes.ts';
import { apiDefinition, key as keyObject, policy as policyObject } from './fixtures.ts';
import { PolicyController } from './policy-controller.ts';

const api = (name: string) => apiDefinition(name, { api_id: name });
const policy = (grants: string[]) => policyObject('gold', grants);
const key = (name: string, applied: string[]) => keyObject(name, { apply_policies: applied });

describe('PolicyController', () => {
  it('counts and names the keys using the policy and lists the granted APIs that exist', async () => {
    const { ctx, caches, events } = fakeContext();
    caches.apis.put(api('orders'));
    caches.policies.put(policy(['orders']));
    caches.keys.put(key('bob', ['gold']));
    caches.keys.put(key('alice', ['gold']));
    caches.keys.put(key('carol', []));
    await new PolicyController(ctx).reconcile({ namespace: 'ns', name: 'gold' });
    expect(caches.policies.get('ns', 'gold')?.status).toMatchObject({
      apis: ['orders'],
      keys: 2,
      conditions: [{ status: 'True', reason: 'Valid', message: 'grants 1 API(s); used by 2 key(s): alice, bob' }],
    });
    expect(events.events).toEqual([]);
  });

  it('names the first 20 keys in order and counts them all, keys of other namespaces and policies aside', async () => {
    const { ctx, caches } = fakeContext();
    caches.policies.put(policy([]));
    const names = Array.from({ length: 25 }, (_, i) => `k${String(i).padStart(2, '0')}`);
    // Added out of order: the status names the first by name, not by arrival.
    for (const name of [...names].reverse()) caches.keys.put(key(name, ['gold']));
    caches.keys.put({ ...key('a-elsewhere', ['gold']), metadata: { ...key('a-elsewhere', []).metadata, namespace: 'other' } });
    caches.keys.put(key('a-silver', ['silver']));
    await new PolicyController(ctx).reconcile({ namespace: 'ns', name: 'gold' });
    const message = `grants no API: its limits cover every API its keys may call; used by 25 key(s): ${names.slice(0, 20).join(', ')}, …`;
    expect(caches.policies.get('ns', 'gold')?.status).toMatchObject({ keys: 25, conditions: [{ reason: 'Valid', message }] });
  });

  it('turns not Ready with a Warning event when a granted API does not exist', async () => {
    const { ctx, caches, events } = fakeContext();
    caches.policies.put(policy(['gone']));
    await new PolicyController(ctx).reconcile({ namespace: 'ns', name: 'gold' });
    expect(caches.policies.get('ns', 'gold')?.status).toMatchObject({ apis: [], conditions: [{ status: 'False', reason: 'MissingApi' }] });
    expect(events.events).toMatchObject([{ type: 'Warning', reason: 'MissingApi' }]);
  });

  it('watches its policies, the APIs they grant, and the keys applying them', () => {
    const { ctx, caches } = fakeContext();
    caches.policies.put(policy(['orders']));
    expect(enqueuedBy(new PolicyController(ctx), () => caches.apis.put(api('orders')))).toEqual(['ns/gold']);
    expect(enqueuedBy(new PolicyController(ctx), () => caches.apis.put(api('unrelated')))).toEqual([]);
    expect(enqueuedBy(new PolicyController(ctx), () => caches.keys.put(key('alice', ['gold', 'silver'])))).toEqual(['ns/gold', 'ns/silver']);
    // The policy a key stops applying counts one key fewer.
    const edited = key('alice', ['bronze']);
    edited.metadata.generation = 2;
    expect(enqueuedBy(new PolicyController(ctx), () => caches.keys.put(edited))).toEqual(['ns/bronze', 'ns/gold', 'ns/silver']);
  });

  it('re-checks the policies of the api_id an API gives up: they grant an API no longer there', () => {
    const { ctx, caches } = fakeContext();
    caches.policies.put(policy(['orders']));
    caches.apis.put(apiDefinition('orders', { api_id: 'orders' }));
    const renamed = apiDefinition('orders', { api_id: 'orders-v2' });
    expect(enqueuedBy(new PolicyController(ctx), () => caches.apis.put({ ...renamed, metadata: { ...renamed.metadata, generation: 2 } }))).toEqual(['ns/gold']);
  });
});
