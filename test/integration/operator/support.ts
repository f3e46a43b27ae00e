import { CoreV1Api, CustomObjectsApi, type KubeConfig, type V1ConfigMap, type V1ManagedFieldsEntry, type V1Pod } from '@kubernetes/client-node';
import { createLogger } from '../../../common/logger.ts';
import { kinds, type KindName } from '../../../crds/kinds.ts';
import { defaultGatewaySettings } from '../../../crds/settings.ts';
import { Operator } from '../../../operator/operator.ts';
import { optionsSchema, type OperatorOptionsInput } from '../../../operator/options.ts';
import { kubectl } from '../../harness/index.ts';
import { waitFor as pollUntil } from '../../support/wait-for.ts';

/** An operator in this process, scoped to the test's namespaces so it never touches other tests' objects. */
export async function startOperator(kc: KubeConfig, input: Partial<OperatorOptionsInput> & { redisUrl: string }): Promise<Operator> {
  const options = optionsSchema.parse({
    healthListen: '127.0.0.1:0',
    webhook: 'false',
    leaderElection: 'false',
    resyncSeconds: 2,
    leaseDurationSeconds: 3,
    ...input,
  });
  const log = createLogger('gw-operator-test', process.env.GW_TEST_LOG_LEVEL ?? 'silent');
  const operator = new Operator(options, { kc, log, settings: defaultGatewaySettings, processMetrics: false });
  await operator.start();
  return operator;
}

/** Polls at 100 ms: the operator reacts to watch events within a few of those. */
export const waitFor = <T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 30_000): Promise<T> =>
  pollUntil(what, probe, timeoutMs, 100);

export interface GwResource {
  metadata: { name: string; namespace: string; uid: string; finalizers?: string[]; generation?: number; resourceVersion?: string; managedFields?: V1ManagedFieldsEntry[] };
  spec: Record<string, unknown>;
  status?: {
    observedGeneration?: number;
    conditions?: Array<{ type: string; status: string; reason: string; message: string }>;
    [field: string]: unknown;
  };
}

export function client(kc: KubeConfig) {
  const custom = kc.makeApiClient(CustomObjectsApi);
  const core = kc.makeApiClient(CoreV1Api);
  const ref = (kind: KindName) => ({ group: kinds[kind].group, version: kinds[kind].version, plural: kinds[kind].plural });
  return {
    core,
    custom,
    async get(kind: KindName, namespace: string, name: string): Promise<GwResource | undefined> {
      try {
        return (await custom.getNamespacedCustomObject({ ...ref(kind), namespace, name })) as GwResource;
      } catch (error) {
        if ((error as { code?: number }).code === 404) return undefined;
        throw error;
      }
    },
    async list(kind: KindName, namespace: string): Promise<GwResource[]> {
      return ((await custom.listNamespacedCustomObject({ ...ref(kind), namespace })) as { items: GwResource[] }).items;
    },
    async create(kind: KindName, namespace: string, body: Record<string, unknown>): Promise<GwResource> {
      return (await custom.createNamespacedCustomObject({
        ...ref(kind),
        namespace,
        body: { apiVersion: `${kinds[kind].group}/${kinds[kind].version}`, kind, ...body },
      })) as GwResource;
    },
    async replaceSpec(kind: KindName, namespace: string, name: string, spec: Record<string, unknown>): Promise<void> {
      for (let attempt = 0; attempt < 5; attempt += 1) {
        const current = (await custom.getNamespacedCustomObject({ ...ref(kind), namespace, name })) as GwResource;
        try {
          await custom.replaceNamespacedCustomObject({ ...ref(kind), namespace, name, body: { ...current, spec } });
          return;
        } catch (error) {
          if ((error as { code?: number }).code !== 409) throw error;
        }
      }
      throw new Error(`could not replace ${kind} ${namespace}/${name}`);
    },
    async remove(kind: KindName, namespace: string, name: string): Promise<void> {
      await custom.deleteNamespacedCustomObject({ ...ref(kind), namespace, name });
    },
    async configMap(namespace: string, name: string): Promise<V1ConfigMap | undefined> {
      try {
        return await core.readNamespacedConfigMap({ namespace, name });
      } catch (error) {
        if ((error as { code?: number }).code === 404) return undefined;
        throw error;
      }
    },
  };
}

export function ready(resource: GwResource | undefined): { status: string; reason: string; message: string } | undefined {
  return resource?.status?.conditions?.find((c) => c.type === 'Ready');
}

/**
 * Removes the gw resources a suite made in its namespace. Namespaces are never deleted without
 * a controller manager, and example api_ids would collide with later suites' operators watching
 * every namespace. Keys carry the session finalizer, so the suite's operator must still run.
 */
export async function removeGwResources(kc: KubeConfig, namespace: string): Promise<void> {
  await kubectl(['delete', '-n', namespace, 'apidefinitions,policies,keys,categories,portalproducts', '--all', '--wait=false'], { allowFail: true });
  await waitFor('keys gone', async () => (await client(kc).list('Key', namespace)).length === 0, 30_000).catch(() => undefined);
}

/** A free loopback port (the webhook URL must name its port before the server starts). */
export { freePort } from '../../harness/ports.ts';

/** A one-container pod, with the annotations given (gw.dev/inject asks for a gateway). */
export const pod = (name: string, annotations?: Record<string, string>): V1Pod => ({
  metadata: { name, annotations },
  spec: { containers: [{ name: 'app', image: 'registry.example/app:1' }] },
});

/**
 * The API server picks a new webhook configuration up from its own cache a moment after the write,
 * and failurePolicy Ignore admits a pod unchanged until then: wait until a dry-run create is injected.
 */
export async function untilInjecting(core: CoreV1Api, namespace: string): Promise<void> {
  for (let attempt = 0; attempt < 40; attempt++) {
    const probe = await core.createNamespacedPod({ namespace, dryRun: 'All', body: pod(`probe-${attempt}`, { 'gw.dev/inject': 'true' }) });
    if (probe.spec?.initContainers?.some((c) => c.name === 'gw-sidecar')) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error('the API server did not call the injection webhook within 10 s');
}
