import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { APIS_ANNOTATION, INJECT_ANNOTATION, injectionPatch, SIDECAR_PORTS } from '../../../operator/webhook/injector.ts';
import { DEFAULT_SIDECAR_RESOURCES } from '../../../operator/webhook/sidecar-resources.ts';
import { startGwProcess, type GwProcess } from './processes.ts';
import { logTail, waitReady } from './ready.ts';
import { freePort } from './wait.ts';

type Kubectl = (args: string[], opts?: { allowFail?: boolean }) => Promise<{ code: number; stdout: string; stderr: string }>;

export interface InjectedSidecarOptions {
  /** Kubeconfig of the pod's ServiceAccount (what the pod's mounted token gives it). */
  kubeconfig: string;
  namespace: string;
  /** The pod's `gw.dev/apis` annotation. */
  apis: readonly string[];
  /** The operator's GW_SIDECAR_ENV_SECRET (the chart's `sidecar.envSecretName`). */
  envSecretName: string;
  /** Reads the env Secret as the kubelet does (cluster-admin here). */
  kubectl: Kubectl;
  dir: string;
  readyTimeoutMs?: number;
  /** GW_LOG_LEVEL of the process (default: the injected container's, info). */
  logLevel?: string;
}

export interface InjectedSidecar {
  process: GwProcess;
  /** The pod's name: its GW_INSTANCE_ID, the reportingInstance of its Events. */
  podName: string;
  /** The environment the process got, as the kubelet would resolve the injected container's. */
  env: Record<string, string>;
  proxyUrl: string;
  adminUrl: string;
  healthUrl: string;
  logTail(lines?: number): string;
  stop(): Promise<void>;
}

/** The container the operator's injector adds to an annotated pod. */
function injectedContainer(pod: V1Pod, envSecretName: string): V1Container {
  const result = injectionPatch(pod, { image: 'gw-sidecar:e2e', redisUrl: undefined, envSecretName, resources: DEFAULT_SIDECAR_RESOURCES });
  if ('denied' in result) throw new Error(`the injector refused the pod: ${result.denied}`);
  const added = result.patch.find((op) => op.path.startsWith('/spec/initContainers'));
  if (!added) throw new Error('the injector added no sidecar');
  return (Array.isArray(added.value) ? added.value[0] : added.value) as V1Container;
}

async function secretData(kubectl: Kubectl, namespace: string, name: string): Promise<Record<string, string>> {
  const reply = await kubectl(['get', 'secret', name, '-n', namespace, '-o', 'json'], { allowFail: true });
  if (reply.code !== 0) return {};
  const data = (JSON.parse(reply.stdout) as { data?: Record<string, string> }).data ?? {};
  return Object.fromEntries(Object.entries(data).map(([key, value]) => [key, Buffer.from(value, 'base64').toString('utf8')]));
}

/**
 * The container's environment as the kubelet builds it: the envFrom Secrets first, then
 * `env` (which wins), field references resolved against the pod.
 */
async function resolveEnv(container: V1Container, pod: V1Pod, o: InjectedSidecarOptions): Promise<Record<string, string>> {
  const env: Record<string, string> = {};
  for (const source of container.envFrom ?? []) {
    if (!source.secretRef?.name) throw new Error(`unexpected envFrom source ${JSON.stringify(source)}`);
    Object.assign(env, await secretData(o.kubectl, o.namespace, source.secretRef.name));
  }
  const fields: Record<string, string | undefined> = { 'metadata.namespace': pod.metadata?.namespace, 'metadata.name': pod.metadata?.name };
  for (const v of container.env ?? []) {
    const value = v.value ?? (v.valueFrom?.fieldRef ? fields[v.valueFrom.fieldRef.fieldPath] : undefined);
    if (value === undefined) throw new Error(`cannot resolve the injected env ${JSON.stringify(v)}`);
    env[v.name] = value;
  }
  return env;
}

/**
 * One injected sidecar as a local process: the environment is the one the operator's
 * injector gives the container of a pod annotated with `apis`, resolved as the kubelet
 * would, and the identity is the pod's ServiceAccount. The one change is the listen
 * addresses: a pod has its own network namespace, local processes share one, so the
 * injector's fixed ports become free loopback ones.
 */
export async function startInjectedSidecar(o: InjectedSidecarOptions): Promise<InjectedSidecar> {
  const podName = `app-${randomBytes(3).toString('hex')}`;
  const pod: V1Pod = {
    metadata: { name: podName, namespace: o.namespace, annotations: { [INJECT_ANNOTATION]: 'true', [APIS_ANNOTATION]: o.apis.join(',') } },
    spec: { containers: [{ name: 'app', image: 'app:e2e' }] },
  };
  const env = await resolveEnv(injectedContainer(pod, o.envSecretName), pod, o);
  const ports = new Map<string, number>();
  for (const port of Object.values(SIDECAR_PORTS)) ports.set(`0.0.0.0:${port}`, await freePort());
  for (const name of ['GW_LISTEN', 'GW_ADMIN_LISTEN', 'GW_HEALTH_LISTEN']) {
    const local = ports.get(env[name] ?? '');
    if (local === undefined) throw new Error(`the injector's ${name}=${env[name]} is not one of its ports`);
    env[name] = `127.0.0.1:${local}`;
  }
  const proc = startGwProcess({
    name: 'gw-injected-sidecar',
    script: 'sidecar/main.ts',
    logPath: join(o.dir, 'injected-sidecar.log'),
    env: { ...env, KUBECONFIG: o.kubeconfig, ...(o.logLevel ? { GW_LOG_LEVEL: o.logLevel } : {}) },
  });
  const url = (name: string): string => `http://${env[name]}`;
  try {
    await waitReady(proc, `${url('GW_HEALTH_LISTEN')}/readyz`, o.readyTimeoutMs ?? 60_000);
  } catch (err) {
    await proc.stop();
    throw err;
  }
  return {
    process: proc,
    podName,
    env,
    proxyUrl: url('GW_LISTEN'),
    adminUrl: url('GW_ADMIN_LISTEN'),
    healthUrl: url('GW_HEALTH_LISTEN'),
    logTail: (lines = 30) => logTail(proc, lines),
    stop: () => proc.stop(),
  };
}
