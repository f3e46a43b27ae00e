import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { injectionPatch, SIDECAR_NAME, type JsonPatchOp } from './injector.ts';
import { DEFAULT_SIDECAR_RESOURCES } from './sidecar-resources.ts';

const options = { image: 'registry.example/gw-sidecar:1.0', redisUrl: 'redis://redis:6379', envSecretName: 'gw-sidecar-env', resources: DEFAULT_SIDECAR_RESOURCES };

const pod = (annotations: Record<string, string> | undefined, initContainers?: V1Container[]): V1Pod => ({
  metadata: { name: 'app', annotations },
  spec: { containers: [{ name: 'app', image: 'app:1' }], ...(initContainers ? { initContainers } : {}) },
});

function patchOf(result: ReturnType<typeof injectionPatch>): JsonPatchOp[] {
  if ('denied' in result) throw new Error(result.denied);
  return result.patch;
}

describe('injectionPatch', () => {
  it('adds the gateway as a native sidecar with apis, identity, ports, probes and a locked-down securityContext', () => {
    const patch = patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/apis': 'orders, users' }), options));
    expect(patch[0]!.op).toBe('add');
    expect(patch[0]!.path).toBe('/spec/initContainers');
    const container = (patch[0]!.value as V1Container[])[0]!;
    expect(container.name).toBe(SIDECAR_NAME);
    expect(container.image).toBe(options.image);
    expect(container.restartPolicy).toBe('Always');
    const env = Object.fromEntries((container.env ?? []).map((e) => [e.name, e.value ?? e.valueFrom?.fieldRef?.fieldPath]));
    expect(env).toMatchObject({
      GW_APIS: 'orders,users',
      GW_NAMESPACE: 'metadata.namespace',
      GW_INSTANCE_ID: 'metadata.name',
      GW_WORKERS: '1',
    });
    expect(container.envFrom).toEqual([{ secretRef: { name: 'gw-sidecar-env' } }]);
    expect(container.ports?.map((p) => p.containerPort)).toEqual([8080, 8081, 8082]);
    expect(container.readinessProbe?.httpGet?.path).toBe('/readyz');
    expect(container.livenessProbe?.httpGet?.path).toBe('/healthz');
    expect(container.startupProbe?.httpGet?.port).toBe('gw-health');
    expect(container.resources?.requests).toEqual({ cpu: '50m', memory: '64Mi' });
    expect(container.securityContext).toMatchObject({ runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(patch[1]).toEqual({ op: 'add', path: '/metadata/annotations/gw.dev~1injected', value: 'true' });
    expect(patch[2]).toEqual({ op: 'add', path: '/metadata/labels', value: { 'gw.dev/gateway': 'true' } });
  });

  it('labels the pod as a gateway, keeping the labels it has', () => {
    const labelled = { ...pod({ 'gw.dev/inject': 'true' }), metadata: { name: 'app', labels: { app: 'shop' }, annotations: { 'gw.dev/inject': 'true' } } };
    expect(patchOf(injectionPatch(labelled, options))[2]).toEqual({ op: 'add', path: '/metadata/labels/gw.dev~1gateway', value: 'true' });
  });

  it('puts the sidecar first among existing init containers', () => {
    const patch = patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }, [{ name: 'migrate', image: 'm:1' }]), options));
    expect(patch[0]!.path).toBe('/spec/initContainers/0');
    expect((patch[0]!.value as V1Container).env?.find((e) => e.name === 'GW_APIS')?.value).toBe('*');
  });

  it('leaves pods that do not ask for it, or already have it, unchanged', () => {
    expect(patchOf(injectionPatch(pod(undefined), options))).toEqual([]);
    expect(patchOf(injectionPatch(pod({ 'gw.dev/inject': 'false' }), options))).toEqual([]);
    expect(patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/injected': 'true' }, [{ name: SIDECAR_NAME, image: 'x', restartPolicy: 'Always' }]), options))).toEqual([]);
  });

  it('gives the sidecar its own service-account token volume, mounted in it alone, whatever the pod says of automounting', () => {
    const automountOff = { ...pod({ 'gw.dev/inject': 'true' }), spec: { automountServiceAccountToken: false, containers: [{ name: 'app', image: 'app:1' }] } };
    const patch = patchOf(injectionPatch(automountOff, options));
    const container = (patch[0]!.value as V1Container[])[0]!;
    expect(container.volumeMounts).toEqual([{ name: 'gw-sidecar-token', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }]);
    expect(patch[3]).toEqual({
      op: 'add',
      path: '/spec/volumes',
      value: [{
        name: 'gw-sidecar-token',
        projected: {
          defaultMode: 0o644,
          sources: [
            { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
            { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
            { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
          ],
        },
      }],
    });
    // Nothing else of the pod changes, the app containers keep the token the pod gives them; a
    // pod naming no ServiceAccount is given the one Kubernetes runs it as, which a token needs.
    expect(patch.map((op) => op.path)).toEqual(['/spec/initContainers', '/metadata/annotations/gw.dev~1injected', '/metadata/labels', '/spec/volumes', '/spec/serviceAccountName']);
    expect(patch[4]).toEqual({ op: 'add', path: '/spec/serviceAccountName', value: 'default' });
    const withVolumes = { ...pod({ 'gw.dev/inject': 'true' }), spec: { containers: [{ name: 'app', image: 'app:1' }], volumes: [{ name: 'data', emptyDir: {} }] } };
    expect(patchOf(injectionPatch(withVolumes, options))[3]).toMatchObject({ op: 'add', path: '/spec/volumes/-', value: { name: 'gw-sidecar-token' } });
    const taken = { ...pod({ 'gw.dev/inject': 'true' }), spec: { containers: [{ name: 'app', image: 'app:1' }], volumes: [{ name: 'gw-sidecar-token', emptyDir: {} }] } };
    expect(injectionPatch(taken, options)).toEqual({ denied: "the pod has a volume named gw-sidecar-token, the name of the gateway sidecar's service-account token volume: rename it" });
  });

  it('warns of a pod that runs as another ServiceAccount than the one granted the sidecar\'s access, and injects it', () => {
    const runningAs = (serviceAccountName: string | undefined): V1Pod => ({ ...pod({ 'gw.dev/inject': 'true' }), spec: { serviceAccountName, containers: [{ name: 'app', image: 'app:1' }] } });
    const granted = { ...options, serviceAccountName: 'gw-sidecar' };
    expect(injectionPatch(runningAs('gw-sidecar'), granted)).not.toHaveProperty('warnings');
    expect(injectionPatch(runningAs('shop'), granted)).toMatchObject({
      warnings: ['gw-sidecar runs as ServiceAccount shop, which needs get, list and watch on configmaps and create on events.k8s.io events in this namespace; the chart grants them to gw-sidecar'],
    });
    expect(injectionPatch(runningAs(undefined), granted)).toMatchObject({ warnings: [expect.stringContaining('runs as ServiceAccount default,')] });
    expect(patchOf(injectionPatch(runningAs('shop'), granted))).toHaveLength(4);
    // An operator not told the sidecar's ServiceAccount warns of none.
    expect(injectionPatch(runningAs('shop'), options)).not.toHaveProperty('warnings');
  });

  it('refuses a pod on the node\'s network, and a Windows pod, saying why', () => {
    const withSpec = (spec: Partial<NonNullable<V1Pod['spec']>>): V1Pod => ({ ...pod({ 'gw.dev/inject': 'true' }), spec: { containers: [{ name: 'app', image: 'app:1' }], ...spec } });
    expect(injectionPatch(withSpec({ hostNetwork: true }), options)).toEqual({
      denied: "the pod uses the node's network (spec.hostNetwork: true): the gateway sidecar would listen on ports 8080, 8081, 8082 of the node, and no second such pod could run there; remove hostNetwork, or gw.dev/inject",
    });
    expect(injectionPatch(withSpec({ os: { name: 'windows' } }), options)).toEqual({
      denied: 'the pod runs on Windows (spec.os.name: windows), and the gateway sidecar is a Linux container: remove gw.dev/inject',
    });
    expect(patchOf(injectionPatch(withSpec({ hostNetwork: false, os: { name: 'linux' } }), options))).not.toEqual([]);
  });

  it('refuses a gw.dev/ annotation it does not know, naming it and the known ones, and takes every one it writes or reads', () => {
    for (const annotations of [{ 'gw.dev/inject': 'true', 'gw.dev/api': 'orders' } as Record<string, string>, { 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-limits': '1Gi' }, { 'gw.dev/injects': 'true' }, { 'gw.dev/inject': 'false', 'gw.dev/apis ': 'x' }]) {
      const typo = Object.keys(annotations).find((k) => k !== 'gw.dev/inject')!;
      expect(injectionPatch(pod(annotations), options)).toEqual({
        denied: `annotation ${typo} is not one gw knows (gw owns the gw.dev/ prefix); the known ones are gw.dev/inject, gw.dev/apis, gw.dev/injected, gw.dev/sidecar-cpu-request, gw.dev/sidecar-memory-request, gw.dev/sidecar-cpu-limit, gw.dev/sidecar-memory-limit`,
      });
    }
    const every = {
      'gw.dev/inject': 'true', 'gw.dev/apis': 'orders', 'gw.dev/injected': 'true', 'gw.dev/sidecar-cpu-request': '10m', 'gw.dev/sidecar-memory-request': '64Mi',
      'gw.dev/sidecar-cpu-limit': '1', 'gw.dev/sidecar-memory-limit': '256Mi', 'example.com/gw.dev': 'x', 'app.gw.dev/x': 'y',
    };
    expect(patchOf(injectionPatch(pod(every), options))).not.toEqual([]);
    // Re-invoked, an injected pod carries gw.dev/injected.
    expect(injectionPatch(pod(every, [{ name: SIDECAR_NAME, image: 'x', restartPolicy: 'Always' }]), options)).toEqual({ patch: [] });
  });

  it('refuses a pod with a container of its own named gw-sidecar, which would stand for the gateway', () => {
    const message = 'the pod has a container named gw-sidecar, the name of the gateway sidecar the webhook injects: rename the container';
    expect(injectionPatch(pod({ 'gw.dev/inject': 'true' }, [{ name: SIDECAR_NAME, image: 'mine:1' }]), options)).toEqual({ denied: message });
    const asApp = { ...pod({ 'gw.dev/inject': 'true' }), spec: { containers: [{ name: SIDECAR_NAME, image: 'mine:1' }] } };
    expect(injectionPatch(asApp, options)).toEqual({ denied: message });
    // Marked injected, but not the native sidecar the injector adds.
    expect(injectionPatch({ ...asApp, metadata: { annotations: { 'gw.dev/inject': 'true', 'gw.dev/injected': 'true' } } }, options)).toEqual({ denied: message });
  });

  it('re-invoked after a later webhook, moves the sidecar back first and refuses a container added on its ports', () => {
    const sidecar: V1Container = { name: SIDECAR_NAME, image: 'gw', restartPolicy: 'Always', ports: [{ containerPort: 8080 }] };
    const injected = (initContainers: V1Container[], containers: V1Container[] = [{ name: 'app', image: 'app:1' }]): V1Pod => ({
      metadata: { name: 'app', annotations: { 'gw.dev/inject': 'true', 'gw.dev/injected': 'true' } },
      spec: { initContainers, containers },
    });
    expect(injectionPatch(injected([sidecar, { name: 'migrate', image: 'm' }]), options)).toEqual({ patch: [] });
    expect(injectionPatch(injected([{ name: 'zinit', image: 'z' }, { name: 'mine', image: 'm' }, sidecar]), options)).toEqual({
      patch: [{ op: 'move', from: '/spec/initContainers/2', path: '/spec/initContainers/0' }],
    });
    expect(injectionPatch(injected([sidecar], [{ name: 'app', image: 'app:1' }, { name: 'zmetrics', image: 'z', ports: [{ containerPort: 8080 }] }]), options))
      .toEqual({ denied: expect.stringMatching(/^container zmetrics declares port 8080, which the gateway sidecar listens on/) as string });
  });

  it('refuses a copy of an injected pod whose gw.dev/apis no longer names what its sidecar serves', () => {
    const first = injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/apis': 'orders' }), options);
    const sidecar = (patchOf(first)[0]!.value as V1Container[])[0]!;
    const copy = (apis: string | undefined): V1Pod => ({
      metadata: { name: 'copy', annotations: { 'gw.dev/inject': 'true', 'gw.dev/injected': 'true', ...(apis === undefined ? {} : { 'gw.dev/apis': apis }) } },
      spec: { initContainers: [sidecar], containers: [{ name: 'app', image: 'app:1' }] },
    });
    expect(injectionPatch(copy('orders'), options)).toEqual({ patch: [] });
    expect(injectionPatch(copy(' orders '), options)).toEqual({ patch: [] });
    expect(injectionPatch(copy('oas-api'), options)).toEqual({
      denied: 'the pod carries the gateway sidecar of an earlier injection (annotation gw.dev/injected), which serves "orders" where gw.dev/apis asks for "oas-api": create the pod from its template, or remove the gw-sidecar init container, its gw-sidecar-token volume and the gw.dev/injected annotation to have it injected again',
    });
    expect(injectionPatch(copy(undefined), options)).toEqual({ denied: expect.stringContaining('where gw.dev/apis asks for "*"') as string });
  });

  it('leaves a mirror pod alone, and a pod that declines the gateway by the label, as by the annotation', () => {
    expect(injectionPatch(pod({ 'gw.dev/inject': 'true', 'kubernetes.io/config.mirror': 'abc' }), options)).toEqual({ patch: [] });
    for (const value of ['false', 'disabled']) {
      const labelled = { ...pod({ 'gw.dev/inject': 'true' }), metadata: { name: 'app', labels: { 'gw.dev/inject': value }, annotations: { 'gw.dev/inject': 'true' } } };
      expect(injectionPatch(labelled, options)).toEqual({ patch: [] });
    }
  });

  it('denies an invalid api list with a message naming the annotation', () => {
    for (const apis of ['a,,b', '../etc', 'x y;z', ',']) {
      const result = injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/apis': apis }), options);
      expect(result).toHaveProperty('denied');
      expect((result as { denied: string }).denied).toContain('gw.dev/apis');
    }
  });

  it('takes GW_REDIS_URL from the env Secret only, never as a literal that would win over it', () => {
    const container = (patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), options))[0]!.value as V1Container[])[0]!;
    expect(container.env?.map((e) => e.name)).not.toContain('GW_REDIS_URL');
    expect(container.envFrom).toEqual([{ secretRef: { name: 'gw-sidecar-env' } }]);
    expect(JSON.stringify(container)).not.toContain('redis://');
  });

  it('gives GW_REDIS_URL as a literal when there is no env Secret', () => {
    const patch = patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), { ...options, envSecretName: undefined }));
    const container = (patch[0]!.value as V1Container[])[0]!;
    expect(container.env?.filter((e) => e.name === 'GW_REDIS_URL')).toEqual([{ name: 'GW_REDIS_URL', value: 'redis://redis:6379' }]);
    expect(container.envFrom).toBeUndefined();
  });

  it('omits Redis and env secret when not configured', () => {
    const patch = patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), { image: 'i', redisUrl: undefined, envSecretName: undefined, resources: DEFAULT_SIDECAR_RESOURCES }));
    const container = (patch[0]!.value as V1Container[])[0]!;
    expect(container.env?.some((e) => e.name === 'GW_REDIS_URL')).toBe(false);
    expect(container.envFrom).toBeUndefined();
  });

  it('sizes the sidecar by the default and the pod\'s annotations, and denies a pod whose annotations cannot be used', () => {
    const sized = patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-limit': '1Gi' }), options));
    expect((sized[0]!.value as V1Container[])[0]!.resources).toEqual({ requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '1Gi' } });
    const heapOf = (patch: JsonPatchOp[]) => (patch[0]!.value as V1Container[])[0]!.env?.find((e) => e.name === 'NODE_OPTIONS')?.value;
    const withHeap = { ...options, nodeOptions: '--max-semi-space-size=8 --max-old-space-size=160' };
    expect(heapOf(patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-limit': '1Gi' }), withHeap)))).toBe('--max-semi-space-size=8 --max-old-space-size=640');
    expect(heapOf(patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), withHeap)))).toBe(withHeap.nodeOptions);
    const denied = injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/sidecar-cpu-limit': 'fast' }), options);
    expect(denied).toEqual({ denied: expect.stringContaining('gw.dev/sidecar-cpu-limit') as string });
    // A limit the gateway's Node process cannot start in.
    expect(injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-limit': '1Mi' }), options)).toEqual({
      denied: 'the gw-sidecar memory limit 1Mi is under 64Mi, less than its Node process holds idle (about 55 MiB): it would be killed as it starts',
    });
    expect(patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-limit': '64Mi' }), options))).not.toEqual([]);
  });

  it('leaves a pod that declines the gateway alone, and denies one whose gw.dev/inject it cannot read, saying what it takes', () => {
    expect(injectionPatch(pod({ 'gw.dev/inject': 'false' }), options)).toEqual({ patch: [] });
    expect(injectionPatch(pod({ 'gw.dev/inject': 'disabled' }), options)).toEqual({ patch: [] });
    expect(injectionPatch(pod({ 'gw.dev/inject': 'yes' }), options)).toEqual({ denied: 'annotation gw.dev/inject must be "true" (inject the gateway) or "false", got "yes"' });
    expect(injectionPatch(pod({ 'gw.dev/inject': 'True' }), options)).toEqual({ denied: expect.stringContaining('got "True"') });
  });

  it('denies a pod whose containers declare a port the gateway listens on, naming the container and the port', () => {
    const withPort = (containerPort: number, protocol?: string): V1Pod => ({
      metadata: { name: 'app', annotations: { 'gw.dev/inject': 'true' } },
      spec: { containers: [{ name: 'web', image: 'app:1', ports: [{ containerPort: 3000 }, { containerPort, protocol }] }] },
    });
    expect(injectionPatch(withPort(8080), options)).toEqual({ denied: expect.stringMatching(/^container web declares port 8080, which the gateway sidecar listens on \(proxy 8080, admin 8081, health 8082\)/) });
    expect(injectionPatch(withPort(8082, 'TCP'), options)).toEqual({ denied: expect.stringContaining('declares port 8082') });
    // Another port, or a UDP one, is the app's own.
    expect(patchOf(injectionPatch(withPort(8083), options))).not.toEqual([]);
    expect(patchOf(injectionPatch(withPort(8080, 'UDP'), options))).not.toEqual([]);
    // A pod that does not ask for the gateway is left alone whatever its ports.
    expect(injectionPatch({ ...withPort(8080), metadata: { name: 'app' } }, options)).toEqual({ patch: [] });
  });

  it("denies a pod whose containers name a port as the gateway names its own, which a Service's targetPort would pick past the gateway", () => {
    const named = (name: string, initContainer = false): V1Pod => {
      const container = { name: 'web', image: 'app:1', ports: [{ name, containerPort: 9000 }] };
      return { metadata: { name: 'app', annotations: { 'gw.dev/inject': 'true' } }, spec: initContainer ? { containers: [{ name: 'main', image: 'app:1' }], initContainers: [container] } : { containers: [container] } };
    };
    for (const name of ['gw-proxy', 'gw-admin', 'gw-health']) {
      expect(injectionPatch(named(name), options)).toEqual({ denied: `container web declares a port named ${name}, the name of a port of the gateway sidecar (gw-proxy, gw-admin, gw-health): a Service's targetPort ${name} would send requests past the gateway to the app; rename the app's port` });
      expect(injectionPatch(named(name, true), options)).toEqual({ denied: expect.stringContaining(`declares a port named ${name}`) });
    }
    expect(patchOf(injectionPatch(named('http'), options))).not.toEqual([]);
  });

  it("sets the configured pull policy, and leaves Kubernetes' default when none is configured", () => {
    const container = (policy: 'Never' | undefined): V1Container =>
      (patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), { ...options, imagePullPolicy: policy }))[0]!.value as V1Container[])[0]!;
    expect(container('Never').imagePullPolicy).toBe('Never');
    expect(container(undefined)).not.toHaveProperty('imagePullPolicy');
  });

  it('sizes the V8 heap with the configured NODE_OPTIONS, and sets none when none is configured', () => {
    const env = (nodeOptions: string | undefined) =>
      ((patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), { ...options, nodeOptions }))[0]!.value as V1Container[])[0]!.env ?? []).filter((e) => e.name === 'NODE_OPTIONS');
    expect(env('--max-semi-space-size=8 --max-old-space-size=160')).toEqual([{ name: 'NODE_OPTIONS', value: '--max-semi-space-size=8 --max-old-space-size=160' }]);
    expect(env(undefined)).toEqual([]);
    expect(env('')).toEqual([]);
  });

  it('gives the configured warm-up request count, 0 included, and leaves the sidecar its default when none is configured', () => {
    const env = (warmUpRequests: number | undefined) =>
      ((patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), { ...options, warmUpRequests }))[0]!.value as V1Container[])[0]!.env ?? []).filter((e) => e.name === 'GW_WARM_UP_REQUESTS');
    expect(env(2000)).toEqual([{ name: 'GW_WARM_UP_REQUESTS', value: '2000' }]);
    expect(env(0)).toEqual([{ name: 'GW_WARM_UP_REQUESTS', value: '0' }]);
    expect(env(undefined)).toEqual([]);
  });

  it('gives the configured session cache size, and leaves the sidecar its default when none is configured', () => {
    const env = (sessionCacheSize: number | undefined) =>
      ((patchOf(injectionPatch(pod({ 'gw.dev/inject': 'true' }), { ...options, sessionCacheSize }))[0]!.value as V1Container[])[0]!.env ?? []).filter((e) => e.name === 'GW_SESSION_CACHE_SIZE');
    expect(env(50_000)).toEqual([{ name: 'GW_SESSION_CACHE_SIZE', value: '50000' }]);
    expect(env(undefined)).toEqual([]);
  });
});
