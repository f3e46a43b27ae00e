/** What the global setup started, handed to test workers through the environment. */
export interface TestEnv {
  kubeconfig: string;
  redisUrl: string;
  helmBin: string;
  /** Folder holding kube-apiserver, etcd, helm and kubectl. */
  binDir: string;
}

export const TEST_ENV_VAR = 'GW_TEST_ENV';

export function publishTestEnv(env: TestEnv): void {
  // Workers are forked after the global setup, so they inherit these; so do servers a
  // test starts as child processes (KUBECONFIG, PATH with the pinned helm).
  process.env[TEST_ENV_VAR] = JSON.stringify(env);
  process.env.KUBECONFIG = env.kubeconfig;
  process.env.PATH = `${env.binDir}:${process.env.PATH ?? ''}`;
}

export function readTestEnv(): TestEnv {
  const raw = process.env[TEST_ENV_VAR];
  if (!raw) {
    throw new Error(`${TEST_ENV_VAR} is not set: run integration tests through vitest's integration project (its global setup starts the test bed)`);
  }
  return JSON.parse(raw) as TestEnv;
}
