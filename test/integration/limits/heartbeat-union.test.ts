import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { gatewayHeartbeatKey } from '../../../common/redis-keys.ts';
import { GatewayHeartbeat, liveGateways, SETS_PER_CALL, UNCOVERED_BEATS } from '../../../sidecar/limits/heartbeat.ts';
import { testEnv } from '../../harness/index.ts';
import { freePort } from '../../harness/ports.ts';

describe('live gateways over several APIs (a global allowance shared by them)', () => {
  const redis = new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });
  const errors: unknown[] = [];
  const gateway = (instanceId: string, siblings: readonly string[] = []): GatewayHeartbeat =>
    new GatewayHeartbeat({
      redis,
      instanceId,
      intervalMs: 60_000,
      now: Date.now,
      reporter: { failed: (error) => errors.push(error), succeeded: () => undefined },
      siblings,
    });

  afterAll(() => redis.disconnect());

  it('counts the union once per beat and follows the next beat', { timeout: 10_000 }, async () => {
    const [x, y] = [`x-${randomUUID()}`, `y-${randomUUID()}`];
    const a = gateway('gw-a');
    const b = gateway('gw-b');
    const c = gateway('gw-c');
    a.serve([x], [y]);
    b.serve([y]);
    c.serve([x, y]);
    await Promise.all([b.beat(), c.beat()]);
    await a.beat();
    const both = [x, y];
    expect(a.count(both)).toBe(3);
    expect(a.count(both)).toBe(3);
    // gw-c leaves both sets: the same coverage list must now read the new membership.
    c.start();
    await c.stop();
    await a.beat();
    expect(a.count(both)).toBe(2);
    expect(a.count([x])).toBe(1);
    expect(errors).toEqual([]);
  });

  it("counts a gateway's other workers before their first beat, and each of them once after it", { timeout: 10_000 }, async () => {
    const [x, y] = [`x-${randomUUID()}`, `y-${randomUUID()}`];
    const workers = ['gw-w0', 'gw-w1', 'gw-w2'];
    const w0 = gateway('gw-w0', workers.slice(1));
    const other = gateway('gw-other');
    w0.serve([x, y]);
    other.serve([x]);
    // Workers start together: none has beaten yet, and each counts the others all the same.
    expect(w0.count([x])).toBe(3);
    expect(w0.count([x, y])).toBe(3);
    await w0.beat();
    expect(w0.count([x])).toBe(3);
    expect(await redis.zrange(gatewayHeartbeatKey(x), '0', '-1')).toEqual(['gw-w0']);
    // Another gateway joins; the siblings that beat since are counted once.
    const w1 = gateway('gw-w1', ['gw-w0', 'gw-w2']);
    w1.serve([x, y]);
    await Promise.all([other.beat(), w1.beat()]);
    await w0.beat();
    expect(w0.count([x])).toBe(4);
    expect(w0.count([y])).toBe(3);
    expect(w0.count([x, y])).toBe(4);
    expect(w1.count([x])).toBe(4);
    expect(errors).toEqual([]);
  });

  it('reads the gateways of an API a counted limit covers, first at once, and no more once no limit has covered it for a while', { timeout: 10_000 }, async () => {
    const [x, y] = [`x-${randomUUID()}`, `y-${randomUUID()}`];
    const a = gateway('gw-a');
    const b = gateway('gw-b');
    a.serve([x]);
    b.serve([y]);
    await b.beat();
    a.start();
    try {
      const both = [x, y];
      expect(a.count(both)).toBe(1);
      // y is neither served nor shared by a Policy here: a key's own grant covers it.
      a.cover(both);
      await a.firstReadOf(both);
      expect(a.count(both)).toBe(2);
      // Asked again for the same list, it reads on; a list no limit covers any more is dropped.
      let read = 0;
      for (let beat = 0; beat < UNCOVERED_BEATS; beat++) {
        a.cover(both);
        await a.beat();
        read = a.count(both);
      }
      expect(read).toBe(2);
      for (let beat = 0; beat <= UNCOVERED_BEATS; beat++) await a.beat();
      expect(a.count(both)).toBe(1);
      expect(errors).toEqual([]);
    } finally {
      await a.stop();
    }
  });

  it('reads the sets of APIs covered request after request in one waiting cycle, not a cycle each', { timeout: 10_000 }, async () => {
    const x = `x-${randomUUID()}`;
    const others = Array.from({ length: 20 }, (_, i) => `y${i}-${randomUUID()}`);
    const b = gateway('gw-b');
    b.serve(others);
    await b.beat();
    // A client of its own whose set reads are counted.
    const counted = new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });
    const read = counted.zrangebyscore.bind(counted);
    let reads = 0;
    counted.zrangebyscore = ((...args: Parameters<typeof read>) => ((reads += 1), read(...args))) as typeof counted.zrangebyscore;
    const a = new GatewayHeartbeat({ redis: counted, instanceId: 'gw-a', intervalMs: 60_000, now: Date.now, reporter: { failed: (error) => errors.push(error), succeeded: () => undefined } });
    a.serve([x]);
    a.start();
    try {
      await a.firstReadOf([x]);
      // Keys first met one request after another, each covering x and an API of b's.
      const lists = others.map((other) => [x, other]);
      for (const list of lists) {
        a.cover(list);
        await nextTurn();
      }
      await a.firstReadOf(lists.at(-1)!);
      expect(lists.map((list) => a.count(list))).toEqual(lists.map(() => 2));
      // The cycle the first cover started, and one more for all the rest: two beats each, of at most 20 sets.
      expect(reads).toBeLessThanOrEqual(2 * 2 * others.length);
      expect(errors).toEqual([]);
    } finally {
      await a.stop();
      counted.disconnect();
    }
  });

  /** More APIs than one script call renews, so a beat takes several calls and turns. */
  const manyApis = (): string[] => {
    const run = randomUUID();
    return Array.from({ length: 2 * SETS_PER_CALL + 50 }, (_, i) => `many-${i}-${run}`);
  };
  const membersOf = (apis: readonly string[]): Promise<string[][]> => Promise.all(apis.map((api) => redis.zrange(gatewayHeartbeatKey(api), '0', '-1')));

  it('renews and reads the set of every API a gateway serves, however many', { timeout: 10_000 }, async () => {
    const apis = manyApis();
    const a = gateway('gw-a');
    const b = gateway('gw-b');
    a.serve(apis);
    b.serve(apis.slice(SETS_PER_CALL - 1));
    await a.beat();
    await b.beat();
    await a.beat();
    expect(apis.map((api) => a.count([api]))).toEqual(apis.map((_, i) => (i < SETS_PER_CALL - 1 ? 1 : 2)));
    const members = await membersOf(apis);
    const expected = apis.map((_, i) => (i < SETS_PER_CALL - 1 ? ['gw-a'] : ['gw-a', 'gw-b']));
    expect(members.map((set) => set.sort())).toEqual(expected);
    // What `kubectl gw status` shows, read as many sets at a time.
    expect(await liveGateways(redis, apis, Date.now())).toEqual(new Map(apis.map((api, i) => [api, expected[i]])));
    // Each set expires on its own if no gateway renews it (three beats).
    const ttls = await Promise.all(apis.map((api) => redis.pttl(gatewayHeartbeatKey(api))));
    expect(ttls.every((ttl) => ttl > 0 && ttl <= 180_000)).toBe(true);
    expect(errors).toEqual([]);
  });

  it('a beat or a read over many APIs that Redis fails reports the failure, keeps the last counts and ends no process', { timeout: 10_000 }, async () => {
    const apis = manyApis();
    // A client whose server is gone: every call fails at once, long before the beat has sent its last.
    const gone = new Redis({ port: await freePort(), lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    gone.on('error', () => undefined);
    const failed: unknown[] = [];
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const a = new GatewayHeartbeat({ redis: gone, instanceId: 'gw-a', intervalMs: 60_000, now: Date.now, reporter: { failed: (error) => failed.push(error), succeeded: () => undefined } });
      a.serve(apis);
      await a.beat();
      for (let turn = 0; turn < 5; turn++) await nextTurn();
      expect(failed).toHaveLength(1);
      expect(unhandled).toEqual([]);
      expect(a.count([apis[0]!])).toBe(1);
      await expect(liveGateways(gone, apis, Date.now())).rejects.toThrow();
      for (let turn = 0; turn < 5; turn++) await nextTurn();
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      gone.disconnect();
    }
  });

  it('a gateway that leaves while a beat is still sending is left in none of its sets', { timeout: 10_000 }, async () => {
    const apis = manyApis();
    const a = gateway('gw-a');
    a.serve(apis);
    // start() begins a beat, which sends its first call and waits for a turn before the next.
    a.start();
    await a.stop();
    for (let turn = 0; turn < 5; turn++) await nextTurn();
    expect((await membersOf(apis)).flat()).toEqual([]);
    expect(errors).toEqual([]);
  });
});
