import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { GatewayHeartbeat } from '../../../sidecar/limits/heartbeat.ts';
import { testEnv } from '../../harness/index.ts';

describe('live gateways over several APIs (a global allowance shared by them)', () => {
  const redis = new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });
  const errors: unknown[] = [];
  const gateway = (instanceId: string): GatewayHeartbeat =>
    new GatewayHeartbeat({
      redis,
      instanceId,
      intervalMs: 60_000,
      now: Date.now,
      reporter: { failed: (error) => errors.push(error), succeeded: () => undefined },
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
});
