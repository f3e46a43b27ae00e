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

  it('turns NotInForce while an API it covers is refused and serves its last good config without it, and Valid once served', async () => {
    const { ctx, caches } = fakeContext();
    const refused = (name: string, policies: string[]) => ({
      ...api(name),
      status: { api_id: name, policies, conditions: [{ type: 'Ready', status: 'False' as const, reason: 'ConfigTooLarge', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' }] },
    });
    caches.apis.put(refused('orders', []));
    caches.apis.put(refused('billing', ['ns/gold']));
    // Not reconciled yet: it is compiled with the policy.
    caches.apis.put(api('fresh'));
    // Refused before it ever compiled: it serves nothing, so a policy granting it is in force on nothing there.
    const { policies: _, ...neverCompiled } = refused('broken', []).status;
    caches.apis.put({ ...api('broken'), status: neverCompiled });
    // One of two ApiDefinitions of an api_id is refused (DuplicateApiId); the other serves it.
    caches.apis.put(refused('shared', []));
    caches.apis.put({ ...apiDefinition('shared-too', { api_id: 'shared' }), status: { api_id: 'shared', policies: ['ns/gold'], conditions: [{ ...neverCompiled.conditions[0]!, status: 'True' as const, reason: 'Compiled' }] } });
    caches.policies.put(policyObject('gold', ['orders', 'billing', 'fresh', 'broken', 'shared']));
    const controller = new PolicyController(ctx);
    await controller.reconcile({ namespace: 'ns', name: 'gold' });
    expect(caches.policies.get('ns', 'gold')?.status).toMatchObject({
      apis: ['billing', 'broken', 'fresh', 'orders', 'shared'],
      conditions: [
        {
          status: 'False',
          reason: 'NotInForce',
          message:
            'not in force on api_id "broken": ApiDefinition ns/broken is ConfigTooLarge and has never been served; ' +
            'api_id "orders": ApiDefinition ns/orders is ConfigTooLarge and serves its last good config, without this Policy',
        },
      ],
    });
    // A policy granting no API covers every API: those serving their last good config without it keep it out too; one serving nothing does not.
    caches.policies.put(policyObject('silver', []));
    await controller.reconcile({ namespace: 'ns', name: 'silver' });
    const silver = caches.policies.get('ns', 'silver')?.status?.conditions?.[0];
    expect(silver).toMatchObject({ reason: 'NotInForce', message: expect.stringContaining('api_id "billing"') });
    expect(silver?.message).not.toContain('broken');
    caches.apis.put(refused('orders', ['ns/gold']));
    caches.apis.put(api('broken'));
    await controller.reconcile({ namespace: 'ns', name: 'gold' });
    expect(caches.policies.get('ns', 'gold')?.status?.conditions).toMatchObject([{ status: 'True', reason: 'Valid' }]);
  });

  it('looks again at the policies covering an API when it is refused or served again, not at each status write', () => {
    const { ctx, caches } = fakeContext();
    caches.policies.put(policy(['orders']));
    caches.policies.put(policyObject('silver', []));
    caches.policies.put(policyObject('other', ['billing']));
    const compiled = { ...api('orders'), status: { api_id: 'orders', policies: ['ns/gold'], conditions: [{ type: 'Ready', status: 'True' as const, reason: 'Compiled', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' }] } };
    caches.apis.put(compiled);
    const refused = { ...compiled, status: { ...compiled.status, conditions: [{ ...compiled.status.conditions[0]!, status: 'False' as const, reason: 'ConfigTooLarge' }] } };
    // The API's status is the operator's own write, which a spec watch is not told of.
    expect(enqueuedBy(new PolicyController(ctx), () => caches.apis.put(refused, true))).toEqual(['ns/gold', 'ns/silver']);
    const reworded = { ...refused, status: { ...refused.status, conditions: [{ ...refused.status.conditions[0]!, message: 'now 1,000,001 bytes' }] } };
    expect(enqueuedBy(new PolicyController(ctx), () => caches.apis.put(reworded, true))).toEqual([]);
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
