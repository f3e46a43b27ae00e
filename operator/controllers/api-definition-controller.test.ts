import type { V1ConfigMap } from '@kubernetes/client-node';
import { describe, expect, it, vi } from 'vitest';
import { RETAIN_ANNOTATION, RETAINED_FOR_UID_ANNOTATION } from '../../common/compiled-config-map.ts';
import { ApiDefinitionController } from './api-definition-controller.ts';
import { enqueuedBy, fakeContext, MemoryConfigMapWriter, MemorySource } from './fakes.ts';
import { apiDefinitionSpecSchema } from '../../crds/schemas/index.ts';
import type { GwObject } from '../runtime/gw-object.ts';
import { apiDefinition, policy } from './fixtures.ts';

const signal = new AbortController().signal;
const api = (name: string, spec: Parameters<typeof apiDefinition>[1] = {}) => apiDefinition(name, { api_id: name, ...spec });

describe('ApiDefinitionController', () => {
  it('writes the compiled ConfigMap and a Ready status once, then nothing while nothing changes', async () => {
    const { ctx, caches, status, events } = fakeContext();
    const controller = new ApiDefinitionController(ctx);
    caches.apis.put(api('orders'));
    caches.policies.put(policy('gold', ['orders']));
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    const cm = caches.configMaps.get('ns', 'gw-api-orders');
    expect(JSON.parse(cm?.data?.['config.json'] ?? '{}').apis[0].api_id).toBe('orders');
    expect(caches.apis.get('ns', 'orders')?.status).toMatchObject({
      api_id: 'orders',
      policies: ['ns/gold'],
      configMap: 'gw-api-orders',
      listen_path: '/orders/',
      rate_limit: 'none',
      conditions: [{ type: 'Ready', status: 'True', reason: 'Compiled' }],
    });
    expect(events.events.map((e) => e.reason)).toEqual(['ConfigWritten']);

    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    expect(status.writes).toHaveLength(1);
    expect(events.events).toHaveLength(1);
  });

  it('writes a ConfigMap lost after its config was compiled again, from the compile step\'s memo', async () => {
    const { ctx, caches } = fakeContext();
    const controller = new ApiDefinitionController(ctx);
    caches.apis.put(api('orders'));
    caches.policies.put(policy('gold', ['orders']));
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    const written = caches.configMaps.get('ns', 'gw-api-orders');
    caches.configMaps.remove('ns', 'gw-api-orders');
    // Nothing the config depends on changed, so the memo answers, without the JSON it wrote.
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    const rewritten = caches.configMaps.get('ns', 'gw-api-orders');
    expect(rewritten?.data).toEqual(written?.data);
    expect(rewritten?.metadata?.annotations).toEqual(written?.metadata?.annotations);
  });

  it('writes back the ConfigMap in force of an API refused, deleted by hand as soon as the refusal shows', async () => {
    const { ctx, caches } = fakeContext();
    const controller = new ApiDefinitionController(ctx);
    caches.apis.put(api('orders'));
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    const good = caches.configMaps.get('ns', 'gw-api-orders');
    caches.apis.put(apiDefinition('orders', { api_id: 'orders', use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x/([', method: 'GET', rate: 1, per: 1 }] } }, 2));
    // Whoever reads the status deletes the ConfigMap the moment it says Ready=False.
    const write = ctx.status.write.bind(ctx.status);
    ctx.status.write = async (kind, obj, status) => {
      await write(kind, obj, status);
      caches.configMaps.remove('ns', 'gw-api-orders');
    };
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    expect(caches.apis.get('ns', 'orders')?.status?.conditions?.[0]).toMatchObject({ status: 'False', reason: 'InvalidRegex' });
    // Its delete asks again: the version in force goes back as it was.
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    expect(caches.configMaps.get('ns', 'gw-api-orders')?.data).toEqual(good?.data);
  });

  it('reports a compile problem as Ready=False with a Warning event and writes no ConfigMap', async () => {
    const { ctx, caches, events } = fakeContext();
    caches.apis.put(api('bad', { use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x/([', method: 'GET', rate: 1, per: 1 }] } }));
    await new ApiDefinitionController(ctx).reconcile({ namespace: 'ns', name: 'bad' }, signal);
    expect(caches.configMaps.list()).toEqual([]);
    expect(caches.apis.get('ns', 'bad')?.status?.conditions?.[0]).toMatchObject({ status: 'False', reason: 'InvalidRegex' });
    expect(events.events).toMatchObject([{ type: 'Warning', reason: 'InvalidRegex' }]);
  });

  it('clears the ConfigMap and policies an earlier version put in the status of an API refused before it ever compiled', async () => {
    const { ctx, caches, status } = fakeContext();
    const bad = api('bad', { use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x/([', method: 'GET', rate: 1, per: 1 }] } });
    caches.apis.put({ ...bad, status: { api_id: 'bad', configMap: 'gw-api-bad', policies: ['ns/gold'] } });
    await new ApiDefinitionController(ctx).reconcile({ namespace: 'ns', name: 'bad' }, signal);
    expect(caches.apis.get('ns', 'bad')?.status).toMatchObject({ api_id: 'bad', configMap: undefined, policies: undefined });
    expect(status.writes).toHaveLength(1);
    // Written once: the next reconcile finds nothing to change.
    await new ApiDefinitionController(ctx).reconcile({ namespace: 'ns', name: 'bad' }, signal);
    expect(status.writes).toHaveLength(1);
  });

  it('puts what the gateways serve in the status (the columns of kubectl get gwapi); a bad edit leaves it as last compiled', async () => {
    const { ctx, caches } = fakeContext();
    const controller = new ApiDefinitionController(ctx);
    const statusAfter = async (resource: GwObject<'ApiDefinition'>) => {
      caches.apis.put({ ...resource, status: caches.apis.get('ns', 'orders')?.status });
      await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
      const { listen_path, rate_limit, conditions } = caches.apis.get('ns', 'orders')!.status!;
      return { listen_path, rate_limit, ready: conditions?.[0]?.reason };
    };
    const limited = { api_id: 'orders', global_rate_limit: { rate: 100, per: 60 } };
    expect(await statusAfter(apiDefinition('orders', limited, 1))).toEqual({ listen_path: '/orders/', rate_limit: '100/60s', ready: 'Compiled' });
    expect(await statusAfter(apiDefinition('orders', { ...limited, disable_rate_limit: true }, 2))).toEqual({ listen_path: '/orders/', rate_limit: 'none', ready: 'Compiled' });
    const oas = {
      openapi: '3.0.3',
      info: { title: 'Orders', version: '1' },
      paths: {},
      'x-gw-api-gateway': {
        info: { name: 'orders' },
        server: { listenPath: { value: '/v2/orders/' } },
        upstream: { url: 'http://127.0.0.1:9000', rateLimit: { enabled: true, rate: 60, per: '1m' } },
      },
    };
    const oasApi = { ...apiDefinition('orders', {}, 3), spec: apiDefinitionSpecSchema.parse({ api_id: 'orders', oas }) };
    expect(await statusAfter(oasApi)).toEqual({ listen_path: '/v2/orders/', rate_limit: '60/60s', ready: 'Compiled' });
    // The gateways keep the last good config: the status keeps saying what it is.
    const badRegex = { use_extended_paths: true, extended_paths: { rate_limit: [{ path: '/x/([', method: 'GET' as const, rate: 1, per: 1 }] } };
    expect(await statusAfter(apiDefinition('orders', { ...limited, ...badRegex }, 4))).toEqual({ listen_path: '/v2/orders/', rate_limit: '60/60s', ready: 'InvalidRegex' });
  });

  /** The API `orders` compiled, then its ConfigMap retained by the admin DELETE of the ApiDefinition of uid `retainedFor`. */
  async function retainedAfterCompile(retainedFor: string) {
    const context = fakeContext();
    const controller = new ApiDefinitionController(context.ctx);
    context.caches.apis.put(api('orders'));
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    const written = context.caches.configMaps.get('ns', 'gw-api-orders')!;
    const annotations = { ...written.metadata?.annotations, [RETAIN_ANNOTATION]: 'true', [RETAINED_FOR_UID_ANNOTATION]: retainedFor };
    context.caches.configMaps.put({ ...written, metadata: { ...written.metadata, ownerReferences: [], annotations } });
    return { ...context, controller };
  }

  it('leaves a retained ConfigMap alone for the grace period and asks to come back when it ends', async () => {
    // Retained by the admin DELETE of this very ApiDefinition (its uid), whose delete is under way.
    const { caches, controller } = await retainedAfterCompile('uid-orders');
    caches.policies.put(policy('gold', ['orders']));
    const result = await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    expect(result?.requeueAfterMs).toBeGreaterThan(14_000);
    expect(result?.requeueAfterMs).toBeLessThanOrEqual(15_000);
    expect(caches.configMaps.get('ns', 'gw-api-orders')?.metadata?.annotations?.[RETAIN_ANNOTATION]).toBe('true');
  });

  it('gives each admin DELETE its own grace, not what is left of an earlier one of an ApiDefinition of the same name', async () => {
    const { caches, controller } = await retainedAfterCompile('uid-orders');
    // The first delete: its mark seen while the ApiDefinition was still cached, then the ApiDefinition gone.
    expect((await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal))?.requeueAfterMs).toBeGreaterThan(14_000);
    caches.apis.remove('ns', 'orders');
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    caches.configMaps.remove('ns', 'gw-api-orders'); // released by the reload
    // Later (past the first grace), the API applied again and deleted again by the admin DELETE.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 60_000 });
    try {
      const again = { ...api('orders'), metadata: { ...api('orders').metadata, uid: 'uid-orders-2' } };
      caches.apis.put(again);
      await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
      const written = caches.configMaps.get('ns', 'gw-api-orders')!;
      const annotations = { ...written.metadata?.annotations, [RETAIN_ANNOTATION]: 'true', [RETAINED_FOR_UID_ANNOTATION]: 'uid-orders-2' };
      caches.configMaps.put({ ...written, metadata: { ...written.metadata, ownerReferences: [], annotations } });
      const result = await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
      expect(result?.requeueAfterMs).toBeGreaterThan(14_000);
      expect(caches.configMaps.get('ns', 'gw-api-orders')?.metadata?.annotations?.[RETAIN_ANNOTATION]).toBe('true');
    } finally {
      vi.useRealTimers();
    }
  });

  it('takes a retained ConfigMap back at once for an ApiDefinition created again since the delete that retained it', async () => {
    const { caches, controller } = await retainedAfterCompile('uid-of-the-deleted-one');
    caches.apis.put(api('orders', { global_rate_limit: { rate: 7, per: 60 } }));
    expect(await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal)).toBeUndefined();
    const taken = caches.configMaps.get('ns', 'gw-api-orders')!;
    expect(taken.metadata?.annotations).not.toHaveProperty(RETAIN_ANNOTATION);
    expect(taken.metadata?.annotations).not.toHaveProperty(RETAINED_FOR_UID_ANNOTATION);
    expect(taken.metadata?.ownerReferences?.[0]?.uid).toBe('uid-orders');
    expect(JSON.parse(taken.data!['config.json']!).apis[0].api_limit).toEqual({ rate: 7, per: 60 });
  });

  it('deletes the ConfigMap of a deleted API, unless it is retained until a reload', async () => {
    const { ctx, caches } = fakeContext();
    const controller = new ApiDefinitionController(ctx);
    for (const name of ['gone', 'kept']) {
      caches.apis.put(api(name));
      await controller.reconcile({ namespace: 'ns', name }, signal);
      caches.apis.remove('ns', name);
    }
    const kept = caches.configMaps.get('ns', 'gw-api-kept')!;
    caches.configMaps.put({ ...kept, metadata: { ...kept.metadata, annotations: { [RETAIN_ANNOTATION]: 'true' } } });
    await controller.reconcile({ namespace: 'ns', name: 'gone' }, signal);
    await controller.reconcile({ namespace: 'ns', name: 'kept' }, signal);
    expect(caches.configMaps.list().map((cm) => cm.metadata?.name)).toEqual(['gw-api-kept']);
  });

  /**
   * The API 'orders' compiled into its ConfigMap (version 1, also in the cache); then the admin
   * DELETE marks the stored ConfigMap retained (version 2) while the cache still holds version 1.
   */
  async function retainedBehindTheCache() {
    const { ctx, caches } = fakeContext();
    const server = new MemorySource<V1ConfigMap>();
    const controller = new ApiDefinitionController({ ...ctx, configMaps: new MemoryConfigMapWriter(server) });
    caches.apis.put(api('orders'));
    await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    const written = server.get('ns', 'gw-api-orders')!;
    const cached = { ...written, metadata: { ...written.metadata, resourceVersion: '1' } };
    caches.configMaps.put(cached);
    const retained = { ...cached, metadata: { ...cached.metadata, resourceVersion: '2', annotations: { [RETAIN_ANNOTATION]: 'true' } } };
    server.put(retained);
    return { controller, caches, server, retained };
  }

  it('does not delete a ConfigMap retained after its cached copy was read: it waits for the newer version', async () => {
    const { controller, caches, server, retained } = await retainedBehindTheCache();
    // ...and deleted the API.
    caches.apis.remove('ns', 'orders');
    const result = await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    expect(result?.requeueAfterMs).toBeGreaterThan(0);
    expect(server.get('ns', 'gw-api-orders')?.metadata?.annotations?.[RETAIN_ANNOTATION]).toBe('true');
    caches.configMaps.put(retained);
    expect(await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal)).toBeUndefined();
    expect(server.list().map((cm) => cm.metadata?.resourceVersion)).toEqual(['2']);
  });

  it('does not write over a ConfigMap retained after its cached copy was read: it waits for the newer version', async () => {
    const { controller, caches, server, retained } = await retainedBehindTheCache();
    // ...while the API's spec changed.
    caches.apis.put(apiDefinition('orders', { api_id: 'orders', proxy: { listen_path: '/orders-v2/', target_url: 'http://upstream' } }, 2));
    const result = await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal);
    expect(result?.requeueAfterMs).toBeGreaterThan(0);
    expect(server.get('ns', 'gw-api-orders')).toEqual(retained);
    // With the newer version cached, the retain mark is seen: the grace period holds the write back.
    caches.configMaps.put(retained);
    expect((await controller.reconcile({ namespace: 'ns', name: 'orders' }, signal))?.requeueAfterMs).toBeGreaterThan(1_000);
    expect(server.get('ns', 'gw-api-orders')).toEqual(retained);
  });

  it('watches its APIs, their ConfigMaps, and the APIs a policy grants before and after a spec change', () => {
    const { ctx, caches } = fakeContext();
    for (const name of ['a', 'b', 'c']) caches.apis.put(api(name));
    caches.policies.put(policy('p', ['a']));
    const controller = new ApiDefinitionController(ctx);
    expect(enqueuedBy(controller, () => caches.policies.put(policy('p', ['b'], 2)))).toEqual(['ns/a', 'ns/b']);
    const statusOnly = policy('p', ['b'], 2);
    expect(enqueuedBy(new ApiDefinitionController(ctx), () => caches.policies.put(statusOnly))).toEqual([]);
    expect(enqueuedBy(new ApiDefinitionController(ctx), () => caches.configMaps.put({ metadata: { namespace: 'ns', name: 'gw-api-c' } }))).toEqual(['ns/c']);
    expect(enqueuedBy(new ApiDefinitionController(ctx), () => caches.configMaps.put({ metadata: { namespace: 'ns', name: 'unrelated' } }))).toEqual([]);
  });

  it('compiles again the ApiDefinitions of an api_id another one gives up (deleted, or renamed): one of them may hold it now', () => {
    const { ctx, caches } = fakeContext();
    caches.apis.put(apiDefinition('first', { api_id: 'shared' }));
    caches.apis.put(apiDefinition('second', { api_id: 'shared' }));
    caches.apis.put(apiDefinition('other', { api_id: 'other' }));
    const controller = new ApiDefinitionController(ctx);
    expect(enqueuedBy(controller, () => caches.apis.remove('ns', 'first'))).toEqual(['ns/first', 'ns/second']);
    const renamed = apiDefinition('second', { api_id: 'other' });
    expect(enqueuedBy(controller, () => caches.apis.put({ ...renamed, metadata: { ...renamed.metadata, generation: 2 } }))).toEqual(['ns/other', 'ns/second']);
  });

  it("compiles a Policy without access_rights into every API's ConfigMap, and every API again when it changes", async () => {
    const { ctx, caches } = fakeContext();
    for (const name of ['a', 'b']) caches.apis.put(api(name));
    caches.policies.put(policy('everywhere', []));
    caches.policies.put(policy('only-a', ['a']));
    const controller = new ApiDefinitionController(ctx);
    for (const name of ['a', 'b']) await controller.reconcile({ namespace: 'ns', name }, signal);
    const policiesOf = (name: string): string[] => Object.keys(JSON.parse(caches.configMaps.get('ns', `gw-api-${name}`)?.data?.['config.json'] ?? '{}').policies);
    expect([policiesOf('a'), policiesOf('b')]).toEqual([['ns/everywhere', 'ns/only-a'], ['ns/everywhere']]);
    // Its edit changes what every API's config holds, so it is compiled again (not from the memo).
    expect(enqueuedBy(controller, () => caches.policies.put(policy('everywhere', [], 2)))).toEqual(['ns/a', 'ns/b']);
    caches.policies.put({ ...policy('everywhere', [], 3), spec: { ...policy('everywhere', [], 3).spec, rate: 7, per: 1 } });
    await controller.reconcile({ namespace: 'ns', name: 'b' }, signal);
    expect(JSON.parse(caches.configMaps.get('ns', 'gw-api-b')?.data?.['config.json'] ?? '{}').policies['ns/everywhere'].rate).toMatchObject({ rate: 7, per: 1 });
  });
});
