import { describe, expect, it } from 'vitest';
import { holds, webhookConfiguration, type WebhookTarget } from './webhook-configuration.ts';

const target: WebhookTarget = { name: 'gw-sidecar-injector', url: 'https://127.0.0.1:9443/mutate', failurePolicy: 'Fail', excludedNamespaces: ['kube-system', 'gw'], watchNamespaces: [] };
const desired = webhookConfiguration(target, Buffer.from('ca').toString('base64'));
const copy = () => structuredClone(desired);

describe('webhook configuration: stored against desired', () => {
  it('holds when the API server only added its own fields', () => {
    const stored = copy();
    stored.metadata = { ...stored.metadata, resourceVersion: '7', uid: 'u', annotations: { 'gw.dev/config-hash': 'old' } };
    stored.webhooks![0]!.namespaceSelector!.matchLabels = undefined;
    Object.assign(stored.webhooks![0]!, { defaultedByANewerServer: true });
    expect(holds(stored, desired)).toBe(true);
  });

  it('does not hold after a hand edit of a field gw sets', () => {
    const edits: Array<(s: ReturnType<typeof copy>) => void> = [
      (s) => { s.webhooks![0]!.clientConfig.caBundle = Buffer.from('other').toString('base64'); },
      (s) => { s.webhooks![0]!.failurePolicy = 'Ignore'; },
      (s) => { s.webhooks![0]!.namespaceSelector!.matchExpressions!.pop(); },
      (s) => { s.webhooks![0]!.objectSelector = {}; },
      (s) => { s.webhooks![0]!.namespaceSelector!.matchLabels = { 'example.com/team': 'payments' }; },
      (s) => { s.webhooks![0]!.objectSelector!.matchLabels = { 'example.com/team': 'payments' }; },
      (s) => { s.webhooks![0]!.matchConditions = []; },
      (s) => { s.webhooks!.push({ ...s.webhooks![0]!, name: 'other.gw.dev' }); },
      (s) => { s.metadata!.labels = {}; },
    ];
    for (const edit of edits) {
      const stored = copy();
      edit(stored);
      expect(holds(stored, desired)).toBe(false);
    }
  });

  it('compares the owner only when there is one to set', () => {
    const owner = [{ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', name: 'gw-operator-webhook', uid: 'u1' }];
    const owned = { ...desired, metadata: { ...desired.metadata, ownerReferences: owner } };
    expect(holds(copy(), owned)).toBe(false);
    expect(holds(owned, desired)).toBe(true);
    expect(holds(owned, owned)).toBe(true);
  });
});
