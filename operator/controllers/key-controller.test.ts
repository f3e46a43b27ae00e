import { ReplyError } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../common/logger.ts';
import { keyHash } from '../../crds/key-hash.ts';
import { keySpecSchema } from '../../crds/schemas/index.ts';
import { TerminalError } from '../kit/reconciler.ts';
import { enqueuedBy, fakeContext } from './fakes.ts';
import { apiDefinition, key as keyObject, policy } from './fixtures.ts';
import { KEY_FINALIZER, KeyController } from './key-controller.ts';

const signal = new AbortController().signal;
const request = { namespace: 'ns', name: 'alice' };
const key = (spec: Parameters<typeof keyObject>[1] = {}, name = 'alice') => keyObject(name, spec);

describe('KeyController', () => {
  it('gives a kubectl-made key its finalizer, a generated raw key in a Secret, and its session under the hash', async () => {
    const { ctx, caches, sessions, events } = fakeContext();
    caches.keys.put(key({ rate: 5, per: 10 }));
    await new KeyController(ctx).reconcile(request, signal);
    const stored = caches.keys.get('ns', 'alice')!;
    expect(stored.metadata.finalizers).toEqual([KEY_FINALIZER]);
    expect(caches.secrets.get('ns', 'gw-key-alice')?.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'Key', name: 'alice', controller: true });
    expect(stored.status).toMatchObject({ key_hash: keyHash('raw-1'), secretName: 'gw-key-alice', conditions: [{ status: 'True', reason: 'SessionStored' }] });
    expect((await sessions.get(keyHash('raw-1')))?.rate).toBe(5);
    expect(events.events.map((e) => e.reason)).toEqual(['SessionCreated']);
  });

  it('says so, as a Warning, when it stores again a session Redis lost, and counts it', async () => {
    const { ctx, caches, sessions, events } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    await controller.reconcile(request, signal);
    await controller.reconcile(request, signal);
    await sessions.delete(keyHash('raw-1'));
    await controller.reconcile(request, signal);
    expect(await sessions.get(keyHash('raw-1'))).not.toBeNull();
    expect(events.events.map((e) => `${e.type} ${e.reason}`)).toEqual(['Normal SessionCreated', 'Warning SessionRestored']);
    expect(events.events[1]!.message).toBe('session was missing from Redis (restarted empty, flushed or evicted) and is stored again (raw key in Secret gw-key-alice)');
    expect((await ctx.metrics.sessionsRestored.get()).values[0]?.value).toBe(1);
  });

  it('remembers through a Redis outage that it had stored the session, so one Redis lost meanwhile is a SessionRestored', async () => {
    const { ctx, caches, sessions, events } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.sessionStored).toBe(true);
    const { get, put } = sessions;
    sessions.get = () => Promise.reject(new Error('Connection is closed.'));
    await expect(controller.reconcile(request, signal)).rejects.toThrow('Connection is closed.');
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({ key_hash: keyHash('raw-1'), sessionStored: true, conditions: [{ reason: 'SessionStoreUnavailable' }] });
    // Redis comes back empty.
    await sessions.delete(keyHash('raw-1'));
    Object.assign(sessions, { get, put });
    await controller.reconcile(request, signal);
    expect(await sessions.get(keyHash('raw-1'))).not.toBeNull();
    expect(events.events.map((e) => `${e.type} ${e.reason}`)).toEqual(['Normal SessionCreated', 'Warning SessionStoreUnavailable', 'Warning SessionRestored']);
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({ sessionStored: true, conditions: [{ status: 'True', reason: 'SessionStored' }] });
  });

  it('says a session never stored is created, not restored, when Redis was down at its first write', async () => {
    const { ctx, caches, sessions, events } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    const { put } = sessions;
    sessions.put = () => Promise.reject(new Error('Connection is closed.'));
    await expect(controller.reconcile(request, signal)).rejects.toThrow('Connection is closed.');
    expect(caches.keys.get('ns', 'alice')!.status?.sessionStored).toBeUndefined();
    sessions.put = put;
    await controller.reconcile(request, signal);
    expect(events.events.map((e) => e.reason)).toEqual(['SessionStoreUnavailable', 'SessionCreated']);
  });

  it('keeps naming the old key while Redis cannot remove its session, and says that key still works, until it can', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key({ key_hash: keyHash('first') }));
    await controller.reconcile(request, signal);
    const { delete: remove } = sessions;
    sessions.delete = () => Promise.reject(new Error('Connection is closed.'));
    caches.keys.put({ ...caches.keys.get('ns', 'alice')!, spec: keySpecSchema.parse({ key_hash: keyHash('second') }) });
    await expect(controller.reconcile(request, signal)).rejects.toThrow('Connection is closed.');
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({
      key_hash: keyHash('first'),
      sessionStored: true,
      conditions: [{ status: 'False', reason: 'SessionStoreUnavailable', message: 'could not remove the session of the key it had before, which works until then: Redis is not connected' }],
    });
    expect(await sessions.get(keyHash('second'))).toBeNull();
    sessions.delete = remove;
    await controller.reconcile(request, signal);
    expect(await sessions.get(keyHash('first'))).toBeNull();
    expect(await sessions.get(keyHash('second'))).not.toBeNull();
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({ key_hash: keyHash('second'), sessionStored: true, conditions: [{ status: 'True', reason: 'SessionStored' }] });
  });

  it('keeps a generated key\'s Secret, which the status names, until Redis removes its session for a key_hash set since', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    await controller.reconcile(request, signal);
    const { delete: remove } = sessions;
    sessions.delete = () => Promise.reject(new Error('Connection is closed.'));
    caches.keys.put({ ...caches.keys.get('ns', 'alice')!, spec: keySpecSchema.parse({ key_hash: keyHash('chosen') }) });
    await expect(controller.reconcile(request, signal)).rejects.toThrow('Connection is closed.');
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({ key_hash: keyHash('raw-1'), secretName: 'gw-key-alice', conditions: [{ reason: 'SessionStoreUnavailable' }] });
    expect(caches.secrets.get('ns', 'gw-key-alice')).toBeDefined();
    sessions.delete = remove;
    await controller.reconcile(request, signal);
    expect(caches.secrets.get('ns', 'gw-key-alice')).toBeUndefined();
    expect(await sessions.get(keyHash('raw-1'))).toBeNull();
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({ key_hash: keyHash('chosen'), conditions: [{ status: 'True', reason: 'SessionStored' }] });
    expect(caches.keys.get('ns', 'alice')!.status?.secretName).toBeUndefined();
  });

  it('says an inactive key is refused, storing its session all the same', async () => {
    const { ctx, caches, sessions } = fakeContext();
    caches.keys.put(key({ key_hash: keyHash('k'), is_inactive: true }));
    await new KeyController(ctx).reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([{ status: 'False', reason: 'Inactive', message: 'is_inactive is true: the gateways refuse the key (403) until it is false' }]);
    expect((await sessions.get(keyHash('k')))?.is_inactive).toBe(true);
  });

  it('removes the session and the Secret of a deleted key, then its finalizer', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const logged: string[] = [];
    ctx.log = createLogger('gw-operator', 'info', { write: (line: string) => void logged.push(line) });
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    await controller.reconcile(request, signal);
    const live = caches.keys.get('ns', 'alice')!;
    caches.keys.put({ ...live, metadata: { ...live.metadata, deletionTimestamp: new Date() } });
    await controller.reconcile(request, signal);
    expect(await sessions.get(keyHash('raw-1'))).toBeNull();
    expect(caches.secrets.list()).toEqual([]);
    expect(caches.keys.get('ns', 'alice')).toBeUndefined();
    expect(logged.map((line) => JSON.parse(line) as Record<string, unknown>)).toContainEqual(expect.objectContaining({ msg: 'key session removed', object: 'ns/alice' }));
  });

  it('says why a deleted Key waits while its session cannot be removed, and keeps its finalizer', async () => {
    const { ctx, caches, sessions, events } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    await controller.reconcile(request, signal);
    const live = caches.keys.get('ns', 'alice')!;
    caches.keys.put({ ...live, metadata: { ...live.metadata, deletionTimestamp: new Date() } });
    sessions.delete = () => Promise.reject(new Error('Connection is closed.'));
    await expect(controller.reconcile(request, signal)).rejects.toThrow('Connection is closed.');
    const waiting = caches.keys.get('ns', 'alice')!;
    expect(waiting.metadata.finalizers).toEqual([KEY_FINALIZER]);
    expect(waiting.status?.conditions).toMatchObject([{ status: 'False', reason: 'SessionStoreUnavailable', message: 'the Key is deleted once its session is removed from Redis, which failed: Redis is not connected' }]);
    expect(events.events.map((e) => e.reason)).toEqual(['SessionCreated', 'SessionStoreUnavailable']);
  });

  it('says a session it cannot write is for Redis not being connected, or in Redis\'s own words when Redis refused it', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    const failures: Array<[Error, string]> = [
      [new Error("Stream isn't writeable and enableOfflineQueue options is false"), 'could not write the session: Redis is not connected'],
      [new ReplyError('OOM command not allowed when used memory > \'maxmemory\''), "could not write the session: Redis refused it: OOM command not allowed when used memory > 'maxmemory'"],
      [new Error('Command timed out'), 'could not write the session: Redis did not answer in time'],
    ];
    for (const [error, message] of failures) {
      sessions.put = () => Promise.reject(error);
      await expect(controller.reconcile(request, signal)).rejects.toBe(error);
      expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([{ status: 'False', reason: 'SessionStoreUnavailable', message }]);
    }
  });

  it('says which applied policies are missing, and drops the old session when the identity changes', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.policies.put(policy('gold'));
    caches.keys.put(key({ key_hash: keyHash('first'), apply_policies: ['gold', 'silver'] }));
    await controller.reconcile(request, signal);
    const first = caches.keys.get('ns', 'alice')!;
    expect(first.status).toMatchObject({ policies: ['ns/gold'], conditions: [{ status: 'False', reason: 'MissingPolicy' }] });
    caches.keys.put({ ...first, spec: keySpecSchema.parse({ key_hash: keyHash('second') }) });
    await controller.reconcile(request, signal);
    expect(await sessions.get(keyHash('first'))).toBeNull();
    expect(await sessions.get(keyHash('second'))).not.toBeNull();
  });

  it('says what is wrong with its own rate_limit_pattern, storing its session all the same', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.policies.put(policy('gold'));
    caches.keys.put(key({ key_hash: keyHash('k'), apply_policies: ['gold'], meta_data: { rate_limit_pattern: '${gw_meta.org}', org: 'acme' } }));
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([
      { status: 'False', reason: 'InvalidRateLimitPattern', message: expect.stringContaining('meta_data.rate_limit_pattern: "${gw_meta.org}" has a "$" that starts no $gw_meta.FIELD reference') },
    ]);
    expect((await sessions.get(keyHash('k')))?.meta_data).toMatchObject({ rate_limit_pattern: '${gw_meta.org}' });
  });

  it('says which APIs of its access rights are missing, with its missing policies, and turns Ready once they exist', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.apis.put(apiDefinition('orders', { api_id: 'orders' }));
    caches.keys.put(key({ key_hash: keyHash('k'), access_rights: { orders: {}, 'no-such-api': {}, 'also-missing': {} } }));
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([
      { status: 'False', reason: 'MissingApi', message: 'access_rights names api_id "also-missing", api_id "no-such-api", not an ApiDefinition' },
    ]);
    // The session is stored all the same, so the key works once the APIs appear.
    expect(Object.keys((await sessions.get(keyHash('k')))?.access_rights ?? {}).sort()).toEqual(['also-missing', 'no-such-api', 'orders']);

    caches.keys.put({ ...caches.keys.get('ns', 'alice')!, spec: keySpecSchema.parse({ key_hash: keyHash('k'), apply_policies: ['gold'], access_rights: { 'no-such-api': {} } }) });
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([
      { status: 'False', reason: 'MissingPolicy', message: 'apply_policies names gold, not a Policy in namespace ns; access_rights names api_id "no-such-api", not an ApiDefinition' },
    ]);

    caches.policies.put(policy('gold'));
    caches.apis.put(apiDefinition('late', { api_id: 'no-such-api' }));
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([{ status: 'True', reason: 'SessionStored' }]);
  });

  it('lets the oldest of two Keys naming one key_hash hold its session, the other DuplicateKeyHash, until the holder goes', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    const hash = keyHash('shared');
    const created = (name: string, rate: number, at: string) => {
      const object = key({ key_hash: hash, rate, per: 60 }, name);
      return { ...object, metadata: { ...object.metadata, creationTimestamp: new Date(at) } };
    };
    caches.keys.put(created('newer', 7, '2026-01-02T00:00:00Z'));
    caches.keys.put(created('older', 5, '2026-01-01T00:00:00Z'));
    // Reconciled in either order, the older one's spec is the session's.
    await controller.reconcile({ namespace: 'ns', name: 'newer' }, signal);
    await controller.reconcile({ namespace: 'ns', name: 'older' }, signal);
    await controller.reconcile({ namespace: 'ns', name: 'newer' }, signal);
    expect((await sessions.get(hash))?.rate).toBe(5);
    expect(caches.keys.get('ns', 'older')!.status?.conditions).toMatchObject([{ status: 'True', reason: 'SessionStored' }]);
    expect(caches.keys.get('ns', 'newer')!.status).toMatchObject({
      key_hash: hash,
      conditions: [{ status: 'False', reason: 'DuplicateKeyHash', message: "spec.key_hash is the hash of Key ns/older's key, which is older and holds its session: this Key is not in force" }],
    });

    // The holder deleted: its finalizer leaves the session, and the other Key takes it over.
    const older = caches.keys.get('ns', 'older')!;
    const requeued = enqueuedBy(controller, () => caches.keys.put({ ...older, metadata: { ...older.metadata, deletionTimestamp: new Date() } }));
    expect(requeued).toEqual(['ns/newer', 'ns/older']);
    await controller.reconcile({ namespace: 'ns', name: 'older' }, signal);
    expect(caches.keys.get('ns', 'older')).toBeUndefined();
    expect((await sessions.get(hash))?.rate).toBe(5);
    await controller.reconcile({ namespace: 'ns', name: 'newer' }, signal);
    // The session is the new holder's now, named by it: its Events and `kubectl gw limits` say so.
    expect(await sessions.get(hash)).toMatchObject({ rate: 7, key_id: 'newer', key_uid: caches.keys.get('ns', 'newer')!.metadata.uid });
    expect(caches.keys.get('ns', 'newer')!.status?.conditions).toMatchObject([{ status: 'True', reason: 'SessionStored' }]);
  });

  it("keeps a generated key's session from a Key that names its hash, even an older one; deleting that Key leaves it", async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put({ ...key({ rate: 5, per: 60 }, 'owner'), metadata: { ...key({}, 'owner').metadata, creationTimestamp: new Date('2026-01-02T00:00:00Z') } });
    await controller.reconcile({ namespace: 'ns', name: 'owner' }, signal);
    const hash = caches.keys.get('ns', 'owner')!.status!.key_hash!;
    // Its status is readable: an older Key edited to name that hash.
    const copier = key({ key_hash: hash, rate: 1000, per: 1 }, 'copier');
    const requeued = enqueuedBy(controller, () => caches.keys.put({ ...copier, metadata: { ...copier.metadata, creationTimestamp: new Date('2026-01-01T00:00:00Z') } }));
    expect(requeued).toEqual(['ns/copier', 'ns/owner']);
    await controller.reconcile({ namespace: 'ns', name: 'copier' }, signal);
    await controller.reconcile({ namespace: 'ns', name: 'owner' }, signal);
    expect(await sessions.get(hash)).toMatchObject({ rate: 5, key_id: 'owner' });
    expect(caches.keys.get('ns', 'owner')!.status?.conditions).toMatchObject([{ status: 'True', reason: 'SessionStored' }]);
    expect(caches.keys.get('ns', 'copier')!.status?.conditions).toMatchObject([
      { status: 'False', reason: 'DuplicateKeyHash', message: "spec.key_hash is the hash of Key ns/owner's key, whose own Secret holds that key and holds its session: this Key is not in force" },
    ]);
    const live = caches.keys.get('ns', 'copier')!;
    caches.keys.put({ ...live, metadata: { ...live.metadata, deletionTimestamp: new Date() } });
    await controller.reconcile({ namespace: 'ns', name: 'copier' }, signal);
    expect(caches.keys.get('ns', 'copier')).toBeUndefined();
    expect(await sessions.get(hash)).toMatchObject({ rate: 5, key_id: 'owner' });
  });

  it('stops the key an emptied Secret held: its session goes, and the status names no hash', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key({ rate: 5, per: 10 }));
    await controller.reconcile(request, signal);
    const hash = keyHash('raw-1');
    expect(await sessions.get(hash)).not.toBeNull();
    const secret = caches.secrets.get('ns', 'gw-key-alice')!;
    caches.secrets.put({ ...secret, data: { key: '' } });
    await expect(controller.reconcile(request, signal)).rejects.toBeInstanceOf(TerminalError);
    expect(await sessions.get(hash)).toBeNull();
    const status = caches.keys.get('ns', 'alice')!.status;
    expect(status?.key_hash).toBeUndefined();
    expect(status?.conditions).toMatchObject([{ status: 'False', reason: 'SecretHoldsNoKey' }]);
  });

  it.each([
    ['a trailing newline', 'my-own-key\n'],
    ['a leading space', ' my-own-key'],
    ['only spaces', '   '],
  ])('refuses a key of its own with %s, which no HTTP client can send, as holding no usable key', async (_case, raw) => {
    const { ctx, caches, sessions } = fakeContext();
    caches.keys.put(key());
    caches.secrets.put({ metadata: { namespace: 'ns', name: 'gw-key-alice', labels: { 'gw.dev/key': 'alice' } }, data: { key: Buffer.from(raw).toString('base64') } });
    await expect(new KeyController(ctx).reconcile(request, signal)).rejects.toBeInstanceOf(TerminalError);
    const status = caches.keys.get('ns', 'alice')!.status;
    expect(status?.conditions).toMatchObject([{ status: 'False', reason: 'SecretHoldsNoKey', message: expect.stringContaining("begins or ends with whitespace, such as echo's newline") }]);
    expect(status?.key_hash).toBeUndefined();
    expect(await sessions.get(keyHash(raw))).toBeNull();
  });

  it('says an expired Key is not in force, and a Key expiring later is', async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key({ key_hash: keyHash('old'), expires: 1_000_000_000 }));
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([
      { status: 'False', reason: 'Expired', message: 'expires (2001-09-09T01:46:40.000Z) has passed: the gateways refuse the key (403)' },
    ]);
    // Its session is kept as it is: the gateways read the expiry from it.
    expect((await sessions.get(keyHash('old')))?.expires).toBe(1_000_000_000);
    caches.keys.put(key({ key_hash: keyHash('later'), expires: Math.floor(Date.now() / 1000) + 3600 }, 'bob'));
    await controller.reconcile({ namespace: 'ns', name: 'bob' }, signal);
    expect(caches.keys.get('ns', 'bob')!.status?.conditions).toMatchObject([{ status: 'True', reason: 'SessionStored' }]);
  });

  it('says the Key is not Ready, and fails terminally, when its Secret holds no key', async () => {
    const { ctx, caches, events } = fakeContext();
    caches.keys.put(key());
    caches.secrets.put({ metadata: { namespace: 'ns', name: 'gw-key-alice', labels: { 'gw.dev/key': 'alice' } }, data: {} });
    await expect(new KeyController(ctx).reconcile(request, signal)).rejects.toBeInstanceOf(TerminalError);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([{ status: 'False', reason: 'SecretHoldsNoKey', message: expect.stringContaining('Secret gw-key-alice holds no usable key') }]);
    expect(events.events.map((e) => e.reason)).toEqual(['SecretHoldsNoKey']);
  });

  it("neither takes over nor deletes a Secret of the Key's name that is not the Key's, and says so", async () => {
    const { ctx, caches, sessions } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    const foreign = { metadata: { namespace: 'ns', name: 'gw-key-alice' }, data: { key: Buffer.from('theirs').toString('base64'), password: 'aHVudGVyMg==' } };
    caches.secrets.put(foreign);
    expect(await controller.reconcile(request, signal)).toEqual({ requeueAfterMs: 30_000 });
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([{ status: 'False', reason: 'SecretNameTaken' }]);
    expect(await sessions.get(keyHash('theirs'))).toBeNull();
    const live = caches.keys.get('ns', 'alice')!;
    caches.keys.put({ ...live, metadata: { ...live.metadata, deletionTimestamp: new Date() } });
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')).toBeUndefined();
    expect(caches.secrets.get('ns', 'gw-key-alice')).toEqual(foreign);
  });

  it('deletes the generated Secret of a Key given a key_hash, and drops secretName from its status', async () => {
    const { ctx, caches } = fakeContext();
    const controller = new KeyController(ctx);
    caches.keys.put(key());
    await controller.reconcile(request, signal);
    const generated = caches.keys.get('ns', 'alice')!;
    expect(generated.status?.secretName).toBe('gw-key-alice');
    caches.keys.put({ ...generated, spec: keySpecSchema.parse({ key_hash: keyHash('own') }) });
    await controller.reconcile(request, signal);
    expect(caches.secrets.get('ns', 'gw-key-alice')).toBeUndefined();
    expect(caches.keys.get('ns', 'alice')!.status).toMatchObject({ key_hash: keyHash('own'), secretName: undefined });
  });

  it('watches its keys, their Secrets, and the keys naming a policy whose spec changed', () => {
    const { ctx, caches } = fakeContext();
    caches.keys.put(key({ apply_policies: ['gold'] }, 'alice'));
    caches.keys.put(key({}, 'bob'));
    expect(enqueuedBy(new KeyController(ctx), () => caches.policies.put(policy('gold')))).toEqual(['ns/alice']);
    expect(enqueuedBy(new KeyController(ctx), () => caches.secrets.put({ metadata: { namespace: 'ns', name: 'gw-key-bob', labels: { 'gw.dev/key': 'bob' } } }))).toEqual([
      'ns/bob',
    ]);
  });

  it('says which applied Policy is refused and in force on no API, and turns Ready once an API serves a version of it', async () => {
    const { ctx, caches } = fakeContext();
    const controller = new KeyController(ctx);
    const ready = (status: 'True' | 'False', reason: string) => [{ type: 'Ready', status, reason, message: '', lastTransitionTime: '2026-01-01T00:00:00Z' }];
    caches.policies.put({ ...policy('gold', ['orders']), status: { conditions: ready('False', 'InvalidRegex') } });
    caches.policies.put({ ...policy('silver', ['orders']), status: { conditions: ready('True', 'Valid') } });
    caches.apis.put({ ...apiDefinition('orders', { api_id: 'orders' }), status: { policies: ['ns/silver'], conditions: ready('True', 'Compiled') } });
    caches.keys.put(key({ key_hash: keyHash('k'), apply_policies: ['gold', 'silver'] }));
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([
      { status: 'False', reason: 'PolicyNotInForce', message: 'apply_policies names gold (InvalidRegex), in force on no API: what it grants and limits does not apply to this key' },
    ]);
    // Refused after it compiled: the API keeps its last good version, which applies.
    caches.apis.put({ ...caches.apis.get('ns', 'orders')!, status: { policies: ['ns/gold', 'ns/silver'], conditions: ready('True', 'Compiled') } });
    await controller.reconcile(request, signal);
    expect(caches.keys.get('ns', 'alice')!.status?.conditions).toMatchObject([{ status: 'True', reason: 'SessionStored' }]);
  });

  it('enqueues the keys of a policy refused or taken again, and of a refused one an API takes in or leaves out (statuses the operator writes); not at a first Ready', () => {
    const { ctx, caches } = fakeContext();
    const ready = (status: 'True' | 'False') => ({ conditions: [{ type: 'Ready', status, reason: status === 'True' ? 'Valid' : 'InvalidRegex', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' }] });
    caches.keys.put(key({ apply_policies: ['gold'] }, 'alice'));
    caches.keys.put(key({ apply_policies: ['silver'] }, 'bob'));
    caches.policies.put(policy('gold', ['orders']));
    caches.policies.put({ ...policy('silver', ['orders']), status: ready('True') });
    expect(enqueuedBy(new KeyController(ctx), () => caches.policies.put({ ...policy('gold', ['orders']), status: ready('True') }, true))).toEqual([]);
    expect(enqueuedBy(new KeyController(ctx), () => caches.policies.put({ ...policy('gold', ['orders']), status: ready('False') }, true))).toEqual(['ns/alice']);
    const orders = apiDefinition('orders', { api_id: 'orders' });
    caches.apis.put({ ...orders, status: { policies: ['ns/silver'] } });
    expect(enqueuedBy(new KeyController(ctx), () => caches.apis.put({ ...orders, status: { policies: ['ns/gold', 'ns/silver'] } }, true))).toEqual(['ns/alice']);
    expect(enqueuedBy(new KeyController(ctx), () => caches.apis.put({ ...orders, status: { policies: ['ns/gold'] } }, true))).toEqual([]);
  });

  it('enqueues the keys granted an API when it appears, changes its api_id or goes, and only those', () => {
    const { ctx, caches } = fakeContext();
    caches.keys.put(key({ access_rights: { orders: {} } }, 'alice'));
    caches.keys.put(key({ access_rights: { renamed: {} } }, 'bob'));
    caches.keys.put(key({ access_rights: { other: {} } }, 'carol'));
    const orders = apiDefinition('orders', { api_id: 'orders' });
    expect(enqueuedBy(new KeyController(ctx), () => caches.apis.put(orders))).toEqual(['ns/alice']);
    expect(enqueuedBy(new KeyController(ctx), () => caches.apis.put(apiDefinition('orders', { api_id: 'renamed' }, 2)))).toEqual(['ns/alice', 'ns/bob']);
    expect(enqueuedBy(new KeyController(ctx), () => caches.apis.remove('ns', 'orders'))).toEqual(['ns/bob']);
  });
});
