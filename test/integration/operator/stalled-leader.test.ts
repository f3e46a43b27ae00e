import { spawn } from 'node:child_process';
import { CoordinationV1Api } from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { sessionKey } from '../../../common/redis-keys.ts';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, ready, startOperator, waitFor } from './support.ts';

const root = new URL('../../../', import.meta.url).pathname;

/**
 * A leader whose process stalls (stopped, swapped out, a long GC) longer than its lease comes
 * back with overdue timers and a cache that still holds what was deleted meanwhile. Its resync
 * must not act on that cache before it has renewed its lease: a session it wrote for a deleted
 * Key would make a revoked key valid again, and no Key would own it to delete it.
 */
describe('operator: a leader that stalls past its lease', () => {
  const kc = kubeConfig();
  const c = client(kc);
  const redis = new Redis(testEnv().redisUrl);
  let successor: Operator | undefined;
  let stalled: ReturnType<typeof spawn> | undefined;

  afterAll(async () => {
    if (stalled?.exitCode === null) {
      stalled.kill('SIGCONT');
      stalled.kill('SIGKILL');
    }
    await successor?.stop();
    redis.disconnect();
  });

  it('writes nothing once it resumes: a Key deleted meanwhile gets no session back', async () => {
    const ns = await createNamespace('operator-stall');
    const holder = async (): Promise<string | undefined> =>
      (await kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ namespace: ns, name: 'gw-operator-leader' }).catch(() => undefined))?.spec?.holderIdentity;
    let output = '';
    stalled = spawn(process.execPath, ['operator/main.ts', '--webhook', 'false', '--health-listen', '127.0.0.1:0', '--lease-duration-seconds', '2', '--resync-seconds', '1'], {
      cwd: root,
      env: { ...process.env, KUBECONFIG: testEnv().kubeconfig, GW_REDIS_URL: testEnv().redisUrl, GW_WATCH_NAMESPACES: ns, GW_OPERATOR_NAMESPACE: ns, GW_INSTANCE_ID: 'stalls', GW_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    stalled.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    stalled.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    await waitFor('the first operator leads', async () => (await holder()) === 'stalls');

    await c.create('Key', ns, { metadata: { name: 'revoked' }, spec: { alias: 'revoked', rate: 3, per: 10 } });
    const created = await waitFor('the Key Ready', async () => {
      const key = await c.get('Key', ns, 'revoked');
      return ready(key)?.status === 'True' ? key : undefined;
    });
    const session = sessionKey(created.status?.key_hash as string);
    expect(await redis.exists(session)).toBe(1);

    stalled.kill('SIGSTOP');
    successor = await startOperator(kc, { redisUrl: testEnv().redisUrl, watchNamespaces: ns, namespace: ns, instanceId: 'takes-over', leaderElection: 'true', leaseDurationSeconds: 2 });
    await waitFor('the second operator leads', async () => successor!.isLeader());
    await c.remove('Key', ns, 'revoked');
    await waitFor('the Key gone', async () => (await c.get('Key', ns, 'revoked')) === undefined);
    expect(await redis.exists(session)).toBe(0);

    // Resumed after more than one resync period: its resync is overdue, its lease long expired.
    const resumedAt = output.length;
    stalled.kill('SIGCONT');
    await waitFor('the first operator steps down', async () => output.slice(resumedAt).includes('lost leadership'));
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await redis.exists(session), output.slice(resumedAt)).toBe(0);
    expect(await holder()).toBe('takes-over');
  });
});
