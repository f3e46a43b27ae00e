import type { V1Container, V1Pod, V1Volume } from '@kubernetes/client-node';
import { SERVICE_ACCOUNT_DIR } from '../../common/kube.ts';
import { RESOURCE_ANNOTATIONS, sidecarNodeOptionsFor, sidecarResourcesFor, type SidecarResources } from './sidecar-resources.ts';

export const INJECT_ANNOTATION = 'gw.dev/inject';
/** INJECT_ANNOTATION values that ask for no gateway ("disabled" as the opt-out label says it). */
export const DECLINED = new Set(['false', 'disabled']);
export const APIS_ANNOTATION = 'gw.dev/apis';
export const INJECTED_ANNOTATION = 'gw.dev/injected';
/**
 * The same mark as a label, so that a selector can find the pods that run a gateway: the
 * chart's NetworkPolicy lets them, and no other app pod, reach Redis.
 */
export const GATEWAY_POD_LABEL = 'gw.dev/gateway';
export const SIDECAR_NAME = 'gw-sidecar';
/** The pod annotations gw reads or writes: it owns the gw.dev/ prefix, and refuses any other key under it. */
export const KNOWN_ANNOTATIONS: readonly string[] = [INJECT_ANNOTATION, APIS_ANNOTATION, INJECTED_ANNOTATION, ...Object.keys(RESOURCE_ANNOTATIONS)];
export const GW_ANNOTATION_PREFIX = 'gw.dev/';
/** What the kubelet marks the API server's copy of a static pod with: a change to it would never reach the pod it runs. */
const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';
/** The sidecar's own service-account token volume (README.md#install-with-helm). */
export const SIDECAR_TOKEN_VOLUME = 'gw-sidecar-token';
/** The ServiceAccount Kubernetes runs a pod as that names none. */
const DEFAULT_SERVICE_ACCOUNT = 'default';

export const SIDECAR_PORTS = { proxy: 8080, admin: 8081, health: 8082 } as const;
/** The names of the sidecar's ports: a Service's `targetPort: gw-proxy` sends traffic through the gateway. */
export const SIDECAR_PORT_NAMES = { proxy: 'gw-proxy', admin: 'gw-admin', health: 'gw-health' } as const;

export interface SidecarOptions {
  image: string;
  /** Unset: Kubernetes' default for the tag (Always for `latest`, else IfNotPresent). */
  imagePullPolicy?: 'Always' | 'IfNotPresent' | 'Never';
  /** The default; a pod's gw.dev/sidecar-* annotations override it. */
  resources: SidecarResources;
  /**
   * NODE_OPTIONS of the sidecar (V8's heap sizes, README.md#chart-values), its old space sized for
   * the default memory limit; unset, Node sizes the heap.
   */
  nodeOptions?: string;
  /** GW_WARM_UP_REQUESTS of the sidecar (docs/architecture.md#warm-up); unset, the sidecar's own default. */
  warmUpRequests?: number | undefined;
  /** GW_SESSION_CACHE_SIZE of the sidecar (docs/architecture.md#sessions); unset, the sidecar's own default. */
  sessionCacheSize?: number | undefined;
  /** Given to the sidecar as a literal GW_REDIS_URL only when there is no env Secret. */
  redisUrl: string | undefined;
  /** A Secret whose keys become the sidecar's environment (admin and portal secrets, GW_REDIS_URL). */
  envSecretName: string | undefined;
  /**
   * The ServiceAccount the chart creates and grants the sidecar's access in each sidecar
   * namespace: a pod that runs as another is injected with a warning. Unset, none is given.
   */
  serviceAccountName?: string | undefined;
}

export interface JsonPatchOp {
  op: 'add' | 'move';
  path: string;
  /** The value an `add` puts at `path`. */
  value?: unknown;
  /** Where a `move` takes the value from. */
  from?: string;
}

export type InjectionResult = { patch: JsonPatchOp[]; warnings?: string[] } | { denied: string };

/** api_id values: what the compile step accepts as an id, comma separated; `*` = all. */
const API_LIST = /^(\*|[A-Za-z0-9][A-Za-z0-9._:-]{0,252}(,[A-Za-z0-9][A-Za-z0-9._:-]{0,252})*)$/;

/**
 * The JSONPatch that adds the gateway to a pod as a native sidecar (an init container
 * with restartPolicy Always, first so it is up before other init containers run), with its
 * own service-account token; for a pod that has it already, what keeps it so on re-invocation.
 * A pod not asking for it gets an empty patch, and so do a mirror pod and a pod labelled
 * gw.dev/inject with a DECLINED value, as annotated with one.
 */
export function injectionPatch(pod: V1Pod, options: SidecarOptions): InjectionResult {
  const annotations = pod.metadata?.annotations ?? {};
  if (MIRROR_POD_ANNOTATION in annotations || DECLINED.has(pod.metadata?.labels?.[INJECT_ANNOTATION] ?? '')) return { patch: [] };
  const unknown = unknownAnnotation(annotations);
  if (unknown !== null) return { denied: unknown };
  const asked = askedFor(annotations[INJECT_ANNOTATION]);
  if (asked !== true) return asked;
  const unfit = unfitPod(pod);
  if (unfit !== null) return { denied: unfit };
  return injectedBefore(pod) ? reinvocationPatch(pod, annotations) : firstPatch(pod, annotations, options);
}

/** The api_ids the annotations ask the sidecar to serve, as GW_APIS takes them. */
const askedApis = (annotations: Record<string, string>): string => (annotations[APIS_ANNOTATION] ?? '*').replace(/\s+/g, '');

/** The gateway added to a pod that has none. */
function firstPatch(pod: V1Pod, annotations: Record<string, string>, options: SidecarOptions): InjectionResult {
  const apis = askedApis(annotations);
  if (!API_LIST.test(apis)) {
    return { denied: `annotation ${APIS_ANNOTATION} must be a comma-separated list of api_id values or "*", got ${JSON.stringify(apis.slice(0, 100))}` };
  }
  const clash = portClash(containersOf(pod));
  if (clash !== null) return { denied: clash };
  if (pod.spec?.volumes?.some((v) => v.name === SIDECAR_TOKEN_VOLUME)) {
    return { denied: `the pod has a volume named ${SIDECAR_TOKEN_VOLUME}, the name of the gateway sidecar's service-account token volume: rename it` };
  }
  const resources = sidecarResourcesFor(annotations, options.resources);
  if ('error' in resources) return { denied: resources.error };
  const container = sidecarContainer(apis, { ...options, resources, nodeOptions: sidecarNodeOptionsFor(options.nodeOptions, options.resources, resources) });
  const patch: JsonPatchOp[] = [
    pod.spec?.initContainers
      ? { op: 'add', path: '/spec/initContainers/0', value: container }
      : { op: 'add', path: '/spec/initContainers', value: [container] },
    { op: 'add', path: `/metadata/annotations/${pointerToken(INJECTED_ANNOTATION)}`, value: 'true' },
    gatewayLabel(pod),
    pod.spec?.volumes
      ? { op: 'add', path: '/spec/volumes/-', value: tokenVolume() }
      : { op: 'add', path: '/spec/volumes', value: [tokenVolume()] },
  ];
  // A projected token needs a named account: the one the ServiceAccount admission plugin names
  // when it runs (before webhooks), and the one Kubernetes runs a pod as that names none.
  if (!pod.spec?.serviceAccountName) patch.push({ op: 'add', path: '/spec/serviceAccountName', value: DEFAULT_SERVICE_ACCOUNT });
  const warning = serviceAccountWarning(pod, options.serviceAccountName);
  return warning === null ? { patch } : { patch, warnings: [warning] };
}

/**
 * A pod the injector gave the gateway, back on re-invocation because a later webhook changed
 * it: a container that webhook added may take the gateway's ports, and an init container it
 * put first would run before the gateway is up.
 */
function reinvocationPatch(pod: V1Pod, annotations: Record<string, string>): InjectionResult {
  const clash = portClash(containersOf(pod).filter((c) => c.name !== SIDECAR_NAME));
  if (clash !== null) return { denied: clash };
  const initContainers = pod.spec?.initContainers ?? [];
  const at = initContainers.findIndex((c) => c.name === SIDECAR_NAME);
  // A pod created from a copy of an injected one (kubectl get -o yaml, edited) keeps the copy's
  // sidecar: one serving other APIs than its annotation now names would serve them unseen.
  const served = initContainers[at]?.env?.find((e) => e.name === 'GW_APIS')?.value;
  const asked = askedApis(annotations);
  if (served !== undefined && served !== asked) {
    return {
      denied: `the pod carries the gateway sidecar of an earlier injection (annotation ${INJECTED_ANNOTATION}), which serves ${JSON.stringify(served)} where ${APIS_ANNOTATION} asks for ${JSON.stringify(asked)}: create the pod from its template, or remove the ${SIDECAR_NAME} init container, its ${SIDECAR_TOKEN_VOLUME} volume and the ${INJECTED_ANNOTATION} annotation to have it injected again`,
    };
  }
  return { patch: at > 0 ? [{ op: 'move', from: `/spec/initContainers/${at}`, path: '/spec/initContainers/0' }] : [] };
}

const containersOf = (pod: V1Pod): V1Container[] => [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];

/** Whether the injector gave this pod its gateway (a pod re-invoked, or created again from an injected one). */
function injectedBefore(pod: V1Pod): boolean {
  return pod.metadata?.annotations?.[INJECTED_ANNOTATION] === 'true'
    && (pod.spec?.initContainers ?? []).some((c) => c.name === SIDECAR_NAME && c.restartPolicy === 'Always');
}

/** Why a pod that asks for the gateway cannot have it, or null when it can. */
function unfitPod(pod: V1Pod): string | null {
  if (pod.spec?.hostNetwork === true) {
    return `the pod uses the node's network (spec.hostNetwork: true): the gateway sidecar would listen on ports ${Object.values(SIDECAR_PORTS).join(', ')} of the node, and no second such pod could run there; remove hostNetwork, or ${INJECT_ANNOTATION}`;
  }
  if (pod.spec?.os?.name === 'windows') {
    return `the pod runs on Windows (spec.os.name: windows), and the gateway sidecar is a Linux container: remove ${INJECT_ANNOTATION}`;
  }
  if (!injectedBefore(pod) && containersOf(pod).some((c) => c.name === SIDECAR_NAME)) {
    return `the pod has a container named ${SIDECAR_NAME}, the name of the gateway sidecar the webhook injects: rename the container`;
  }
  return null;
}

/** A gw.dev/ annotation gw does not know (a misspelt one would be ignored, and the pod run otherwise than meant), or null. */
function unknownAnnotation(annotations: Record<string, string>): string | null {
  const key = Object.keys(annotations).find((k) => k.startsWith(GW_ANNOTATION_PREFIX) && !KNOWN_ANNOTATIONS.includes(k));
  if (key === undefined) return null;
  return `annotation ${key.slice(0, 100)} is not one gw knows (gw owns the ${GW_ANNOTATION_PREFIX} prefix); the known ones are ${KNOWN_ANNOTATIONS.join(', ')}`;
}

/**
 * A ServiceAccount other than the sidecar's, which the chart grants what the gateway does:
 * the injection goes on (the pod's owner may have granted it), with a warning kubectl prints.
 */
function serviceAccountWarning(pod: V1Pod, expected: string | undefined): string | null {
  const actual = pod.spec?.serviceAccountName || DEFAULT_SERVICE_ACCOUNT;
  if (expected === undefined || expected === '' || actual === expected) return null;
  return `${SIDECAR_NAME} runs as ServiceAccount ${actual}, which needs get, list and watch on configmaps and create on events.k8s.io events in this namespace; the chart grants them to ${expected}`;
}

/**
 * The sidecar's own token, CA and namespace, the three files of the volume the ServiceAccount
 * admission plugin mounts: with `automountServiceAccountToken: false` the plugin mounts none,
 * and without a token the sidecar could not read its configs. The plugin leaves alone a
 * container that mounts this path already, so the app containers keep what their pod says.
 */
function tokenVolume(): V1Volume {
  return {
    name: SIDECAR_TOKEN_VOLUME,
    projected: {
      defaultMode: 0o644,
      sources: [
        // The plugin's lifetime: the kubelet renews the token at 80% of it, client-node rereads the file every minute.
        { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
        { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
        { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
      ],
    },
  };
}

/**
 * Whether INJECT_ANNOTATION asks for the gateway: true, or the answer for a pod that does not.
 * A value the injector cannot read ("yes", "True") is refused rather than taken as either:
 * the pod's owner meant something, and only they can say what.
 */
function askedFor(inject: string | undefined): true | InjectionResult {
  if (inject === undefined || DECLINED.has(inject)) return { patch: [] };
  if (inject === 'true') return true;
  return { denied: `annotation ${INJECT_ANNOTATION} must be "true" (inject the gateway) or "false", got ${JSON.stringify(inject.slice(0, 40))}` };
}

/**
 * A container of the pod that declares a TCP port the gateway listens on, or a port under one
 * of the gateway's port names. The containers of a pod share its network, so of two on one port
 * one could not bind it, and the pod would not run. Of two ports of one name, a Service's
 * `targetPort: gw-proxy` picks the app's (the first that is not an init container's), so every
 * request through the Service would pass by the gateway, its auth and its limits.
 */
function portClash(containers: readonly V1Container[]): string | null {
  const gatewayPorts: readonly number[] = Object.values(SIDECAR_PORTS);
  const gatewayNames: readonly string[] = Object.values(SIDECAR_PORT_NAMES);
  for (const container of containers) {
    for (const port of container.ports ?? []) {
      if (port.name !== undefined && gatewayNames.includes(port.name)) {
        return `container ${container.name} declares a port named ${port.name}, the name of a port of the gateway sidecar (${gatewayNames.join(', ')}): a Service's targetPort ${port.name} would send requests past the gateway to the app; rename the app's port`;
      }
      if (gatewayPorts.includes(port.containerPort) && (port.protocol ?? 'TCP') === 'TCP') {
        return `container ${container.name} declares port ${port.containerPort}, which the gateway sidecar listens on (proxy ${SIDECAR_PORTS.proxy}, admin ${SIDECAR_PORTS.admin}, health ${SIDECAR_PORTS.health}): move the app to another port, and point the ApiDefinition's target at it`;
      }
    }
  }
  return null;
}

/** Adds GATEWAY_POD_LABEL, creating the labels map when the pod has none. */
function gatewayLabel(pod: V1Pod): JsonPatchOp {
  return pod.metadata?.labels
    ? { op: 'add', path: `/metadata/labels/${pointerToken(GATEWAY_POD_LABEL)}`, value: 'true' }
    : { op: 'add', path: '/metadata/labels', value: { [GATEWAY_POD_LABEL]: 'true' } };
}

/** A map key as one JSON Pointer token (RFC 6901: `~` and `/` escaped). */
const pointerToken = (key: string): string => key.replaceAll('~', '~0').replaceAll('/', '~1');

export function sidecarContainer(apis: string, options: SidecarOptions): V1Container {
  const env: NonNullable<V1Container['env']> = [
    { name: 'GW_APIS', value: apis },
    { name: 'GW_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
    { name: 'GW_INSTANCE_ID', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    { name: 'GW_LISTEN', value: `0.0.0.0:${SIDECAR_PORTS.proxy}` },
    { name: 'GW_ADMIN_LISTEN', value: `0.0.0.0:${SIDECAR_PORTS.admin}` },
    { name: 'GW_HEALTH_LISTEN', value: `0.0.0.0:${SIDECAR_PORTS.health}` },
    // One process per pod: the app's replicas are how a sidecar fleet scales, and the sidecar's
    // resources are sized for one (docs/architecture.md#workers).
    { name: 'GW_WORKERS', value: '1' },
  ];
  if (options.nodeOptions) env.push({ name: 'NODE_OPTIONS', value: options.nodeOptions });
  if (options.warmUpRequests !== undefined) env.push({ name: 'GW_WARM_UP_REQUESTS', value: String(options.warmUpRequests) });
  if (options.sessionCacheSize !== undefined) env.push({ name: 'GW_SESSION_CACHE_SIZE', value: String(options.sessionCacheSize) });
  // With an env Secret, GW_REDIS_URL (password included) comes from it: a literal here would
  // win over envFrom and put the password in every pod spec.
  if (options.redisUrl && !options.envSecretName) env.push({ name: 'GW_REDIS_URL', value: options.redisUrl });
  const probe = (path: string, periodSeconds: number, failureThreshold: number) => ({
    httpGet: { path, port: SIDECAR_PORT_NAMES.health },
    periodSeconds,
    failureThreshold,
    timeoutSeconds: 2,
  });
  return {
    name: SIDECAR_NAME,
    image: options.image,
    ...(options.imagePullPolicy ? { imagePullPolicy: options.imagePullPolicy } : {}),
    restartPolicy: 'Always',
    env,
    // Not optional: without the Secret the sidecar has no Redis URL and refuses to start, so the
    // kubelet's own reason (CreateContainerConfigError: secret not found) is the clearer one,
    // and it starts the sidecar once the Secret is there.
    ...(options.envSecretName ? { envFrom: [{ secretRef: { name: options.envSecretName } }] } : {}),
    ports: [
      { name: SIDECAR_PORT_NAMES.proxy, containerPort: SIDECAR_PORTS.proxy, protocol: 'TCP' },
      { name: SIDECAR_PORT_NAMES.admin, containerPort: SIDECAR_PORTS.admin, protocol: 'TCP' },
      { name: SIDECAR_PORT_NAMES.health, containerPort: SIDECAR_PORTS.health, protocol: 'TCP' },
    ],
    resources: options.resources,
    volumeMounts: [{ name: SIDECAR_TOKEN_VOLUME, mountPath: SERVICE_ACCOUNT_DIR, readOnly: true }],
    startupProbe: probe('/healthz', 1, 60),
    livenessProbe: probe('/healthz', 10, 3),
    readinessProbe: probe('/readyz', 5, 3),
    securityContext: {
      runAsNonRoot: true,
      runAsUser: 65532,
      runAsGroup: 65532,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
  };
}
