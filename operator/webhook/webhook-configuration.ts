import { AdmissionregistrationV1Api, ApiException, type KubeConfig, type V1MutatingWebhookConfiguration, type V1OwnerReference } from '@kubernetes/client-node';
import { CONFIG_HASH_ANNOTATION, configHash } from '../../common/compiled-config-map.ts';
import { DEFAULT_RELEASE_NAME, releaseNames } from '../runtime/release-names.ts';
import { DECLINED, INJECT_ANNOTATION } from './injector.ts';

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
        name: 'inject.gw.dev',
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        failurePolicy: target.failurePolicy,
        matchPolicy: 'Equivalent',
        timeoutSeconds: 5,
        reinvocationPolicy: 'IfNeeded',
        clientConfig,
        rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'], scope: 'Namespaced' }],
        // Only a pod that says something of a gateway is sent (INJECT_ANNOTATION present, and not
        // one of the DECLINED values): the API server judges this itself, so while no operator
        // answers, with failurePolicy Fail, the pods refused are those that must not run without
        // their gateway (or that the injector would refuse), and every other pod of the cluster
        // is created as usual.
        matchConditions: [
          {
            name: 'asks-for-a-gateway',
            expression: `has(object.metadata.annotations) && '${INJECT_ANNOTATION}' in object.metadata.annotations && !(object.metadata.annotations['${INJECT_ANNOTATION}'] in ${JSON.stringify([...DECLINED])})`,
          },
        ],
        // Labels let a namespace or pod opt out even when annotated.
        namespaceSelector: {
          matchExpressions: [
            { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: target.excludedNamespaces },
            ...(target.watchNamespaces.length > 0 ? [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: target.watchNamespaces }] : []),
            { key: INJECT_ANNOTATION, operator: 'NotIn', values: ['disabled'] },
          ],
        },
        objectSelector: { matchExpressions: [{ key: INJECT_ANNOTATION, operator: 'NotIn', values: ['disabled'] }] },
      },
    ],
  };
}

/** Creates or replaces the webhook configuration (caBundle, target, failure policy). */
export async function applyWebhookConfiguration(kc: KubeConfig, desired: V1MutatingWebhookConfiguration, ownerReferences?: V1OwnerReference[]): Promise<void> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  const name = desired.metadata?.name ?? '';
  // The API server fills defaults into what it stores, so "changed" is judged on a hash of what we wrote.
  const hash = configHash(JSON.stringify({ webhooks: desired.webhooks, ownerReferences }));
  const body = { ...desired, metadata: { ...desired.metadata, ownerReferences, annotations: { [CONFIG_HASH_ANNOTATION]: hash } } };
  for (let attempt = 0; attempt < 3; attempt += 1) {
    let current: V1MutatingWebhookConfiguration | undefined;
    try {
      current = await api.readMutatingWebhookConfiguration({ name });
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 404) throw error;
    }
    try {
      if (!current) await api.createMutatingWebhookConfiguration({ body });
      else if (current.metadata?.annotations?.[CONFIG_HASH_ANNOTATION] !== hash) {
        await api.replaceMutatingWebhookConfiguration({ name, body: { ...body, metadata: { ...body.metadata, resourceVersion: current.metadata?.resourceVersion } } });
      }
      return;
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409) throw error;
    }
  }
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
