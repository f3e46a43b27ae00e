import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import type { KindName } from '../../../crds/kinds.ts';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, ready, removeGwResources, startOperator, waitFor } from './support.ts';

/**
 * What the controllers' watches bring back at once, with the periodic resync too far away to
 * hide a missed one (the other operator suites resync every 2 s): an ApiDefinition giving up
 * an api_id hands it to the other ApiDefinition of that api_id, the Policies granting it turn
 * MissingApi, and a Key whose Secret is emptied stops working.
 */
describe('operator: watches of one kind for another, without a resync', () => {
  const kc = kubeConfig();
  const c = client(kc);
  let ns: string;
  let operator: Operator;
  let redis: Redis;
  /** Well within the resync period below: only a watch can make it. */
  const soon = 10_000;

  const api = (name: string, apiId: string) =>
    c.create('ApiDefinition', ns, { metadata: { name }, spec: { api_id: apiId, use_keyless: true, proxy: { listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' } } });
  const readyOf = async (kind: KindName, name: string) => ready(await c.get(kind, ns, name));

  beforeAll(async () => {
    ns = await createNamespace('op-watches');
    operator = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns, resyncSeconds: 600 });
    redis = new Redis(testEnv().redisUrl);
  });

  afterAll(async () => {
    await removeGwResources(kc, ns);
    await operator?.stop();
    redis?.disconnect();
  });

  it('compiles the other ApiDefinition of an api_id at once when the one holding it is deleted', async () => {
    const apiId = `${ns}-dup`;
    await api('dup-first', apiId);
    await waitFor('first Ready', async () => (await readyOf('ApiDefinition', 'dup-first'))?.status === 'True');
    await api('dup-second', apiId);
    await waitFor('second DuplicateApiId', async () => (await readyOf('ApiDefinition', 'dup-second'))?.reason === 'DuplicateApiId');
    await c.remove('ApiDefinition', ns, 'dup-first');
    await waitFor('second Ready', async () => (await readyOf('ApiDefinition', 'dup-second'))?.status === 'True', soon);
    expect(await c.configMap(ns, 'gw-api-dup-second')).toBeDefined();
  });

  it('gives an api_id to a newer ApiDefinition that compiles over an older one that never can (a bad regex)', async () => {
    const apiId = `${ns}-regex`;
    const proxy = (name: string) => ({ listen_path: `/${name}/`, target_url: 'http://127.0.0.1:9000' });
    await c.create('ApiDefinition', ns, {
      metadata: { name: 'regex-broken' },
      spec: { api_id: apiId, use_keyless: true, proxy: proxy('regex-broken'), extended_paths: { rate_limit: [{ path: '/z(', method: 'GET', enabled: true, rate: 2, per: 60 }] } },
    });
    await waitFor('broken InvalidRegex', async () => (await readyOf('ApiDefinition', 'regex-broken'))?.reason === 'InvalidRegex');
    await api('regex-valid', apiId);
    await waitFor('valid Ready', async () => (await readyOf('ApiDefinition', 'regex-valid'))?.status === 'True', soon);
    expect(await c.configMap(ns, 'gw-api-regex-valid')).toBeDefined();
    await waitFor('broken DuplicateApiId', async () => (await readyOf('ApiDefinition', 'regex-broken'))?.reason === 'DuplicateApiId', soon);
  });

  it('turns a Policy MissingApi at once when the API it grants changes its api_id', async () => {
    const apiId = `${ns}-renamed`;
    await api('renamed', apiId);
    await c.create('Policy', ns, { metadata: { name: 'grants-renamed' }, spec: { rate: 5, per: 60, access_rights: { [apiId]: {} } } });
    await waitFor('policy Valid', async () => (await readyOf('Policy', 'grants-renamed'))?.reason === 'Valid');
    await c.replaceSpec('ApiDefinition', ns, 'renamed', { api_id: `${apiId}-v2`, use_keyless: true, proxy: { listen_path: '/renamed/', target_url: 'http://127.0.0.1:9000' } });
    await waitFor('policy MissingApi', async () => (await readyOf('Policy', 'grants-renamed'))?.reason === 'MissingApi', soon);
  });

  it('stops the key of a Key whose Secret is emptied: its session goes, until the Secret holds a key again', async () => {
    await c.create('Key', ns, { metadata: { name: 'emptied' }, spec: { rate: 5, per: 60 } });
    await waitFor('Key Ready', async () => (await readyOf('Key', 'emptied'))?.status === 'True');
    const hash = (await c.get('Key', ns, 'emptied'))?.status?.key_hash;
    if (typeof hash !== 'string') throw new Error('the Key shows no key_hash');
    expect(await redis.exists(sessionKey(hash))).toBe(1);
    await c.core.replaceNamespacedSecret({ namespace: ns, name: 'gw-key-emptied', body: { ...(await c.core.readNamespacedSecret({ namespace: ns, name: 'gw-key-emptied' })), data: { key: '' } } });
    await waitFor('SecretHoldsNoKey', async () => (await readyOf('Key', 'emptied'))?.reason === 'SecretHoldsNoKey', soon);
    await waitFor('session gone', async () => (await redis.exists(sessionKey(hash))) === 0, soon);
    expect((await c.get('Key', ns, 'emptied'))?.status?.key_hash).toBeUndefined();
    await c.core.replaceNamespacedSecret({ namespace: ns, name: 'gw-key-emptied', body: { ...(await c.core.readNamespacedSecret({ namespace: ns, name: 'gw-key-emptied' })), stringData: { key: 'a-key-of-my-own' } } });
    await waitFor('Key Ready again', async () => (await readyOf('Key', 'emptied'))?.status === 'True', soon);
    expect((await c.get('Key', ns, 'emptied'))?.status?.key_hash).not.toBe(hash);
  });
});
