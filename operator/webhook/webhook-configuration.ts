import { AdmissionregistrationV1Api, ApiException, type KubeConfig, type V1MutatingWebhookConfiguration, type V1OwnerReference } from '@kubernetes/client-node';
import { CONFIG_HASH_ANNOTATION, configHash } from '../../common/compiled-config-map.ts';
import { DECLINED, INJECT_ANNOTATION } from './injector.ts';

export const WEBHOOK_CONFIGURATION = 'gw-sidecar-injector';

export interface WebhookTarget {
  /** Explicit URL (outside a cluster, tests): https://127.0.0.1:PORT/mutate. */
  url?: string;
  /** Or the Service in front of the operator pods. */
  service?: { name: string; namespace: string; port: number };
  failurePolicy: 'Fail' | 'Ignore';
  /** Namespaces never injected into (the operator's own, kube-system). */
  excludedNamespaces: string[];
}

export function webhookConfiguration(target: WebhookTarget, caBundle: string): V1MutatingWebhookConfiguration {
  const clientConfig = target.url
    ? { url: target.url, caBundle }
    : { service: { name: target.service?.name ?? '', namespace: target.service?.namespace ?? '', port: target.service?.port ?? 443, path: '/mutate' }, caBundle };
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: WEBHOOK_CONFIGURATION, labels: { 'app.kubernetes.io/managed-by': 'gw-operator' } },
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
  // The API server fills defaults into what it stores, so "changed" is judged on a hash of what we wrote.
  const hash = configHash(JSON.stringify({ webhooks: desired.webhooks, ownerReferences }));
  const body = { ...desired, metadata: { ...desired.metadata, ownerReferences, annotations: { [CONFIG_HASH_ANNOTATION]: hash } } };
  for (let attempt = 0; attempt < 3; attempt += 1) {
    let current: V1MutatingWebhookConfiguration | undefined;
    try {
      current = await api.readMutatingWebhookConfiguration({ name: WEBHOOK_CONFIGURATION });
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 404) throw error;
    }
    try {
      if (!current) await api.createMutatingWebhookConfiguration({ body });
      else if (current.metadata?.annotations?.[CONFIG_HASH_ANNOTATION] !== hash) {
        await api.replaceMutatingWebhookConfiguration({ name: WEBHOOK_CONFIGURATION, body: { ...body, metadata: { ...body.metadata, resourceVersion: current.metadata?.resourceVersion } } });
      }
      return;
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409) throw error;
    }
  }
}
