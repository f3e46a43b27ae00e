import { AdmissionregistrationV1Api, ApiException, type KubeConfig, type V1MutatingWebhookConfiguration, type V1OwnerReference } from '@kubernetes/client-node';
import { sameData } from '../../common/same-data.ts';
import { DEFAULT_RELEASE_NAME, releaseNames } from '../runtime/release-names.ts';
import { trustedCas } from './certs.ts';
import { DECLINED, GW_ANNOTATION_PREFIX, INJECT_ANNOTATION, KNOWN_ANNOTATIONS } from './injector.ts';

const WEBHOOK_NAME = 'inject.gw.dev';

export interface WebhookTarget {
  /** Name of the configuration, the release's own (operator/runtime/release-names.ts). */
  name: string;
  /** Explicit URL (outside a cluster, tests): https://127.0.0.1:PORT/mutate. */
  url?: string;
  /** Or the Service in front of the operator pods. */
  service?: { name: string; namespace: string; port: number };
  failurePolicy: 'Fail' | 'Ignore';
  /** Namespaces never injected into (the operator's own, kube-system). */
  excludedNamespaces: string[];
  /**
   * The namespaces the operator reconciles; empty = all. A pod elsewhere would get a gateway
   * whose APIs are never compiled, and answer 404 to every request.
   */
  watchNamespaces: string[];
}

export function webhookConfiguration(target: WebhookTarget, caBundle: string): V1MutatingWebhookConfiguration {
  const clientConfig = target.url
    ? { url: target.url, caBundle }
    : { service: { name: target.service?.name ?? '', namespace: target.service?.namespace ?? '', port: target.service?.port ?? 443, path: '/mutate' }, caBundle };
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: target.name, labels: { 'app.kubernetes.io/managed-by': 'gw-operator' } },
    webhooks: [
      {
        name: WEBHOOK_NAME,
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        failurePolicy: target.failurePolicy,
        matchPolicy: 'Equivalent',
        timeoutSeconds: 5,
        reinvocationPolicy: 'IfNeeded',
        clientConfig,
        rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'], scope: 'Namespaced' }],
        // Only a pod that says something of a gateway is sent (INJECT_ANNOTATION present, and not
        // one of the DECLINED values, or a gw.dev/ annotation the injector does not know, which
        // it refuses: `gw.dev/injects` must not run the pod without its gateway unnoticed): the
        // API server judges this itself, so while no operator answers, with failurePolicy Fail,
        // the pods refused are those that must not run without their gateway (or that the
        // injector would refuse), and every other pod of the cluster is created as usual.
        matchConditions: [
          {
            name: 'asks-for-a-gateway',
            expression: `has(object.metadata.annotations) && (('${INJECT_ANNOTATION}' in object.metadata.annotations && !(object.metadata.annotations['${INJECT_ANNOTATION}'] in ${JSON.stringify([...DECLINED])})) || object.metadata.annotations.exists(k, k.startsWith('${GW_ANNOTATION_PREFIX}') && !(k in ${JSON.stringify(KNOWN_ANNOTATIONS)})))`,
          },
        ],
        // Labels let a namespace or pod opt out even when annotated.
        namespaceSelector: {
          matchExpressions: [
            { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: target.excludedNamespaces },
            ...(target.watchNamespaces.length > 0 ? [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: target.watchNamespaces }] : []),
            { key: INJECT_ANNOTATION, operator: 'NotIn', values: [...DECLINED] },
          ],
        },
        objectSelector: { matchExpressions: [{ key: INJECT_ANNOTATION, operator: 'NotIn', values: [...DECLINED] }] },
      },
    ],
  };
}

/**
 * Creates the webhook configuration, or replaces it when a field gw sets is not what is stored
 * (a hand edit, another CA, other options), so an edit is repaired by the next apply; an
 * unchanged one is not written. The caBundle trusts `cas` (this PKI's CA and the one it
 * replaced) and the still-good CAs the stored one trusts (certs.ts, trustedCas).
 */
export async function applyWebhookConfiguration(kc: KubeConfig, target: WebhookTarget, cas: string[], ownerReferences?: V1OwnerReference[]): Promise<void> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  for (let attempt = 0; attempt < 3; attempt += 1) {
    const current = await readConfiguration(api, target.name);
    const live = Buffer.from(current?.webhooks?.find((hook) => hook.name === WEBHOOK_NAME)?.clientConfig.caBundle ?? '', 'base64').toString('utf8');
    const desired = webhookConfiguration(target, Buffer.from(trustedCas(cas, live)).toString('base64'));
    const body = { ...desired, metadata: { ...desired.metadata, ownerReferences } };
    try {
      if (!current) await api.createMutatingWebhookConfiguration({ body });
      else if (!holds(current, body)) {
        await api.replaceMutatingWebhookConfiguration({ name: target.name, body: { ...body, metadata: { ...body.metadata, resourceVersion: current.metadata?.resourceVersion } } });
      }
      return;
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409) throw error;
    }
  }
}

async function readConfiguration(api: AdmissionregistrationV1Api, name: string): Promise<V1MutatingWebhookConfiguration | undefined> {
  try {
    return await api.readMutatingWebhookConfiguration({ name });
  } catch (error) {
    if (error instanceof ApiException && error.code === 404) return undefined;
    throw error;
  }
}

/**
 * Whether the stored configuration has every field gw sets (webhooks, labels, owner) as gw sets
 * it. A field only the stored one has is the API server's default, not a difference: writing on
 * it would rewrite the configuration on every apply. The selectors are gw's whole, though: the
 * API server defaults nothing in them, and a matchLabels added by hand narrows which pods are sent.
 */
export function holds(stored: V1MutatingWebhookConfiguration, desired: V1MutatingWebhookConfiguration): boolean {
  const sameSelectors = (desired.webhooks ?? []).every((hook, i) =>
    sameData(stored.webhooks?.[i]?.namespaceSelector, hook.namespaceSelector) && sameData(stored.webhooks?.[i]?.objectSelector, hook.objectSelector));
  return sameSelectors && covers(stored, { metadata: { labels: desired.metadata?.labels, ownerReferences: desired.metadata?.ownerReferences }, webhooks: desired.webhooks });
}

function covers(stored: unknown, desired: unknown): boolean {
  if (Array.isArray(desired)) return Array.isArray(stored) && stored.length === desired.length && desired.every((item, i) => covers(stored[i], item));
  if (desired === null || typeof desired !== 'object') return stored === desired;
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored)) return false;
  const fields = stored as Record<string, unknown>;
  return Object.entries(desired).every(([key, value]) => value === undefined || covers(fields[key], value));
}

const LEGACY_CONFIGURATION = releaseNames(DEFAULT_RELEASE_NAME).webhookConfiguration;

/**
 * Deletes gw-sidecar-injector, the name every release's configuration had before it was named
 * after the release, when this release owns it. Upgraded, a release with another name registers
 * its own; the old configuration, still owned by the release and so never garbage-collected,
 * would go on sending pods to the webhook with the CA of the old certificate Secret, which the
 * new certificate does not chain to. Another release may hold the name: only this one's goes.
 */
export async function removeLegacyWebhookConfiguration(kc: KubeConfig, name: string, ownerReferences: V1OwnerReference[] | undefined): Promise<void> {
  const owner = ownerReferences?.[0]?.uid;
  if (name === LEGACY_CONFIGURATION || owner === undefined) return;
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  try {
    const legacy = await api.readMutatingWebhookConfiguration({ name: LEGACY_CONFIGURATION });
    if (!legacy.metadata?.ownerReferences?.some((ref) => ref.uid === owner)) return;
    await api.deleteMutatingWebhookConfiguration({ name: LEGACY_CONFIGURATION, body: { preconditions: { uid: legacy.metadata.uid } } });
  } catch (error) {
    // Gone already, changed meanwhile, or not this operator's to read (outside the chart's RBAC):
    // nothing to delete, and the release's own configuration stands.
    if (!(error instanceof ApiException) || ![403, 404, 409].includes(error.code)) throw error;
  }
}
