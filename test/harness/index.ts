/**
 * The test bed's API for integration and end-to-end tests. The global setup
 * (global-setup.ts) starts one Redis and one control plane per run; these functions reach
 * them, and can start extra servers a test may stop or restart on its own.
 */
import { randomBytes } from 'node:crypto';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { ensureBins } from './bins.ts';
import { startControlPlaneServers, type ControlPlaneHandle } from './control-plane.ts';
import { applyCrds } from './crds.ts';
import { readTestEnv, type TestEnv } from './env.ts';
import { runKubectl, type KubectlOptions, type KubectlResult } from './kubectl.ts';
import { startRedisServer, type RedisHandle } from './redis.ts';

export type { TestEnv, KubectlOptions, KubectlResult, RedisHandle, ControlPlaneHandle };

export function testEnv(): TestEnv {
  return readTestEnv();
}

/** A client-node KubeConfig for the run's control plane (cluster admin). */
export function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(testEnv().kubeconfig);
  return kc;
}

/** kubectl against the run's control plane. */
export function kubectl(args: string[], opts?: KubectlOptions): Promise<KubectlResult> {
  return runKubectl(testEnv().kubeconfig, args, opts);
}

/** Creates a namespace with a unique name and returns that name. */
export async function createNamespace(prefix = 'test'): Promise<string> {
  const base = prefix.toLowerCase().replace(/[^a-z0-9-]/g, '-').slice(0, 50).replace(/^-+|-+$/g, '') || 'test';
  const name = `${base}-${randomBytes(4).toString('hex')}`;
  await kubeConfig().makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name } } });
  return name;
}

/** An extra Redis of the caller's own (for example to stop it mid-test). */
export function startRedis(settings?: readonly string[]): Promise<RedisHandle> {
  return startRedisServer({ settings });
}

/** An extra control plane with the product CRDs applied; expensive, use sparingly. */
export async function startControlPlane(): Promise<ControlPlaneHandle> {
  const plane = await startControlPlaneServers(await ensureBins());
  try {
    await applyCrds(plane.kubeconfig);
  } catch (err) {
    await plane.stop();
    throw err;
  }
  return plane;
}
export { startRedisCluster, startRedisSentinel, startRedisTls, startRedisWithPassword, type RedisClusterHandle, type RedisSentinelHandle, type PasswordRedisHandle, type TlsRedisHandle } from './redis-topologies.ts';
