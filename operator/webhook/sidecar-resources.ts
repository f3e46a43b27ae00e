import { z } from 'zod';

/**
 * CPU and memory of the injected sidecar: the operator's default (the chart's
 * `sidecar.resources`), overridden per pod by annotations, as a pod's own containers are
 * sized by whoever writes the pod.
 */

const SUFFIX: Record<string, number> = {
  '': 1, n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};
/**
 * Kubernetes' quantity grammar (k8s.io/apimachinery resource.Quantity): a signed number with an
 * optional fraction (`1`, `1.`, `.5`, `+2.5`), then a binary suffix, a decimal one, or a decimal
 * exponent with a signed integer (`1e3`, `2E-3`). `E` alone is exa, `E` with digits an exponent.
 */
const QUANTITY = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$/;

/** A quantity's value in base units (cores, bytes), or null when it is not one. */
export function quantityValue(quantity: string): number | null {
  const match = QUANTITY.exec(quantity);
  if (!match) return null;
  const [, number, suffix, exponent] = match;
  return exponent === undefined ? Number(number) * SUFFIX[suffix ?? '']! : Number(`${number}e${exponent}`);
}

/**
 * The most CPU and memory a sidecar may be given: far above what any gateway uses (it idles at
 * about 55 MiB, docs/architecture.md#the-images), so a value above is a slip of the suffix
 * (`1000Ei`, `500` for `500m`) that would, for memory, also size V8's heap from it.
 */
export const MAX_SIDECAR_RESOURCES = { cpu: '1000', memory: '1Ti' } as const;

/** Why the sidecar cannot be given this much or this little of a resource, or null when it can. */
function boundProblem(resource: 'cpu' | 'memory', kind: 'request' | 'limit', quantity: string | undefined): string | null {
  const value = quantity === undefined ? null : quantityValue(quantity);
  if (value === null) return null;
  if (value < 0) return `the gw-sidecar ${resource} ${kind} ${quantity} is negative`;
  const most = MAX_SIDECAR_RESOURCES[resource];
  if (value > quantityValue(most)!) return `the gw-sidecar ${resource} ${kind} ${quantity} is above ${most}, more than a gateway sidecar can use: check the suffix`;
  return null;
}

/** The least memory limit the sidecar runs with (docs/architecture.md#the-images: it idles at 51 to 54 MiB). */
export const MIN_SIDECAR_MEMORY_LIMIT = '64Mi';

/** Why a sidecar given this memory limit could not run, or null when it can (or there is none). */
export function memoryLimitProblem(limit: string | undefined): string | null {
  const bytes = limit === undefined ? null : quantityValue(limit);
  if (bytes === null || bytes >= quantityValue(MIN_SIDECAR_MEMORY_LIMIT)!) return null;
  return `the gw-sidecar memory limit ${limit} is under ${MIN_SIDECAR_MEMORY_LIMIT}, less than its Node process holds idle (about 55 MiB): it would be killed as it starts`;
}

/** Why a request above its limit cannot be, or null when it is not above it. */
function requestAboveLimit(resource: string, request: string | undefined, limit: string | undefined): string | null {
  if (request === undefined || limit === undefined) return null;
  const [requested, limited] = [quantityValue(request), quantityValue(limit)];
  if (requested === null || limited === null || requested <= limited) return null;
  return `the gw-sidecar ${resource} request ${request} is above its limit ${limit}`;
}

// Helm's toJson writes `cpu: 1` as a number.
const quantity = z.union([z.string(), z.number().nonnegative().transform(String)])
  .refine((q) => quantityValue(q) !== null, 'must be a Kubernetes quantity such as 100m, 0.5, 128Mi or 1Gi');
const pair = z.strictObject({ 'cpu': quantity.optional(), 'memory': quantity.optional(), 'ephemeral-storage': quantity.optional() });

/**
 * The operator's default: one that no pod could run with (a memory limit under the least, a
 * request above its limit) or that is out of bounds (MAX_SIDECAR_RESOURCES) stops the operator at
 * start, rather than every injected pod.
 */
export const sidecarResourcesSchema = z.strictObject({ requests: pair.optional(), limits: pair.optional() }).superRefine((resources, ctx) => {
  const problems = [
    ...(['cpu', 'memory'] as const).flatMap((resource) => [
      boundProblem(resource, 'request', resources.requests?.[resource]),
      boundProblem(resource, 'limit', resources.limits?.[resource]),
    ]),
    memoryLimitProblem(resources.limits?.memory),
    ...(['cpu', 'memory'] as const).map((resource) => requestAboveLimit(resource, resources.requests?.[resource], resources.limits?.[resource])),
  ];
  for (const message of problems) if (message !== null) ctx.addIssue({ code: 'custom', message });
});
export type SidecarResources = z.infer<typeof sidecarResourcesSchema>;

export const DEFAULT_SIDECAR_RESOURCES: SidecarResources = { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } };

export const RESOURCE_ANNOTATIONS = {
  'gw.dev/sidecar-cpu-request': ['requests', 'cpu'],
  'gw.dev/sidecar-memory-request': ['requests', 'memory'],
  'gw.dev/sidecar-cpu-limit': ['limits', 'cpu'],
  'gw.dev/sidecar-memory-limit': ['limits', 'memory'],
} as const;

/**
 * What Kubernetes takes in a pod but no one means in an annotation: a fraction of a byte (`0.5`
 * is 500m bytes, which the API server only warns of), and a CPU limit of 0, which sets none and
 * brings the default request down to 0 with it.
 */
function annotatedValueProblem(resource: 'cpu' | 'memory', kind: 'requests' | 'limits', quantity: string): string | null {
  const value = quantityValue(quantity)!;
  if (resource === 'memory' && !Number.isInteger(value)) return `the gw-sidecar memory ${kind === 'requests' ? 'request' : 'limit'} ${quantity} is not a whole number of bytes: give it in Mi or Gi, such as 128Mi`;
  if (resource === 'cpu' && kind === 'limits' && value === 0) return 'a gw-sidecar cpu limit of 0 sets no limit and brings the cpu request down to 0: leave the annotation out for the default, or give a limit such as 500m';
  return null;
}

/**
 * The sidecar's resources for a pod: the default with the pod's annotations on top. A default
 * request above an annotated limit comes down to the limit (as Kubernetes does for a limit
 * given alone). An invalid annotation (not a quantity, negative, above MAX_SIDECAR_RESOURCES), or
 * an annotated request above its limit, is an error message for the webhook to deny the pod
 * with, so the mistake shows at `kubectl apply` and not as a pod that never starts.
 */
export function sidecarResourcesFor(annotations: Record<string, string>, defaults: SidecarResources): SidecarResources | { error: string } {
  const resources = { requests: { ...defaults.requests }, limits: { ...defaults.limits } };
  const annotated = new Set<string>();
  for (const [annotation, [kind, resource]] of Object.entries(RESOURCE_ANNOTATIONS)) {
    const value = annotations[annotation]?.trim();
    if (value === undefined) continue;
    if (quantityValue(value) === null) {
      return { error: `annotation ${annotation} must be a Kubernetes quantity such as 100m, 128Mi or 1Gi, got ${JSON.stringify(value.slice(0, 40))}` };
    }
    const bound = boundProblem(resource, kind === 'requests' ? 'request' : 'limit', value) ?? annotatedValueProblem(resource, kind, value);
    if (bound !== null) return { error: `annotation ${annotation}: ${bound}` };
    resources[kind][resource] = value;
    annotated.add(`${kind}.${resource}`);
  }
  const memoryLimit = memoryLimitProblem(resources.limits.memory);
  if (memoryLimit !== null) return { error: memoryLimit };
  for (const resource of ['cpu', 'memory'] as const) {
    const aboveLimit = requestAboveLimit(resource, resources.requests[resource], resources.limits[resource]);
    if (aboveLimit === null) continue;
    if (annotated.has(`requests.${resource}`)) return { error: aboveLimit };
    resources.requests[resource] = resources.limits[resource];
  }
  return resources;
}

/** V8's old-space size in NODE_OPTIONS, in MiB (Node takes the dash and the underscore forms). */
const OLD_SPACE = /(--max[-_]old[-_]space[-_]size=)(\d+)/;

/**
 * The sidecar's NODE_OPTIONS for a pod. The configured old space is sized for the default
 * memory limit (the chart's 160 MiB of 256Mi); a pod whose sidecar gets another limit gets the
 * old space in the same proportion. Left at 160 MiB under a 96Mi limit, V8 would let garbage
 * grow past the limit and the kernel would kill the sidecar before V8 collected it; raised
 * with a larger limit, the sidecar uses the memory it was given.
 */
export function sidecarNodeOptionsFor(nodeOptions: string | undefined, defaults: SidecarResources, resources: SidecarResources): string | undefined {
  const defaultLimit = defaults.limits?.memory === undefined ? null : quantityValue(defaults.limits.memory);
  const limit = resources.limits?.memory === undefined ? null : quantityValue(resources.limits.memory);
  if (nodeOptions === undefined || !defaultLimit || !limit || limit === defaultLimit) return nodeOptions;
  return nodeOptions.replace(OLD_SPACE, (_, flag: string, mib: string) => `${flag}${Math.max(16, Math.floor((Number(mib) * limit) / defaultLimit))}`);
}
