import { randomBytes } from 'node:crypto';
import { AdmissionregistrationV1Api, CoordinationV1Api, CoreV1Api, RbacAuthorizationV1Api, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { freePort, pod, startOperator, untilInjecting, waitFor } from './support.ts';

/**
 * Two releases of gw on one cluster, their operators in one namespace, each watching its own
 * app namespace: neither takes the other's webhook configuration, Lease or certificate Secret,
 * and the one that goes leaves the other injecting and reconciling.
 */
describe('operator: two releases on one cluster', () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const leases = kc.makeApiClient(CoordinationV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const suffix = randomBytes(3).toString('hex');
  const releases = { a: `acme-${suffix}`, b: `edge-${suffix}` };
  const owners = { a: `${releases.a}-operator-webhook`, b: `${releases.b}-operator-webhook` };
  let operatorNs: string;
  let appNs: { a: string; b: string };
  let unwatchedNs: string;
  const running: Operator[] = [];

  const start = async (release: 'a' | 'b'): Promise<Operator> => {
    const port = await freePort();
    const operator = await startOperator(kc, {
      redisUrl: testEnv().redisUrl,
      releaseName: releases[release],
      namespace: operatorNs,
      watchNamespaces: appNs[release],
      instanceId: `operator-${release}`,
      leaderElection: 'true',
      leaseDurationSeconds: 2,
      webhook: 'true',
      webhookListen: `127.0.0.1:${port}`,
      webhookUrl: `https://127.0.0.1:${port}/mutate`,
      webhookFailurePolicy: 'Ignore',
      webhookOwnerClusterRole: owners[release],
      sidecarImage: `registry.example/gw-sidecar:${release}`,
    });
    running.push(operator);
    return operator;
  };
  const sidecarImage = (created: V1Pod): string | undefined => created.spec?.initContainers?.find((c) => c.name === 'gw-sidecar')?.image;
  const inject = (namespace: string, name: string): Promise<V1Pod> => core.createNamespacedPod({ namespace, body: pod(name, { 'gw.dev/inject': 'true' }) });
  const configuration = (release: 'a' | 'b') => admission.readMutatingWebhookConfiguration({ name: `${releases[release]}-sidecar-injector` });
  const lease = (release: 'a' | 'b') => leases.readNamespacedLease({ namespace: operatorNs, name: `${releases[release]}-operator-leader` });
  const secret = (release: 'a' | 'b') => core.readNamespacedSecret({ namespace: operatorNs, name: `${releases[release]}-webhook-tls` });

  /** The release's configuration calls its operator, for its namespaces, trusting the CA of its Secret. */
  const expectOwnRegistration = async (release: 'a' | 'b', operator: Operator): Promise<void> => {
    const hook = (await configuration(release)).webhooks?.[0];
    expect(hook?.clientConfig.url).toBe(`https://${operator.options.webhookListen}/mutate`);
    expect(hook?.namespaceSelector?.matchExpressions).toContainEqual({ key: 'kubernetes.io/metadata.name', operator: 'In', values: [appNs[release]] });
    const ca = Buffer.from((await secret(release)).data?.['ca.crt'] ?? '', 'base64').toString();
    expect(Buffer.from(hook?.clientConfig.caBundle ?? '', 'base64').toString()).toContain(ca);
  };

  beforeAll(async () => {
    operatorNs = await createNamespace('operator-releases');
    appNs = { a: await createNamespace('operator-acme'), b: await createNamespace('operator-edge') };
    unwatchedNs = await createNamespace('operator-unwatched');
    for (const name of Object.values(owners)) await rbac.createClusterRole({ body: { metadata: { name }, rules: [] } });
  });

  afterAll(async () => {
    await Promise.all(running.map((operator) => operator.stop()));
    for (const release of ['a', 'b'] as const) {
      await admission.deleteMutatingWebhookConfiguration({ name: `${releases[release]}-sidecar-injector` }).catch(() => undefined);
    }
    await admission.deleteMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' }).catch(() => undefined);
    for (const name of Object.values(owners)) await rbac.deleteClusterRole({ name }).catch(() => undefined);
  });

  it('each keeps its own webhook configuration, Lease and Secret, and injects only in the namespaces it watches', async () => {
    // What release b registered before names were derived from the release: release a leaves
    // it alone, b removes it once it registers its own.
    const ownerB = await rbac.readClusterRole({ name: owners.b });
    const legacy = { url: 'https://127.0.0.1:1/mutate', caBundle: Buffer.from('old').toString('base64') };
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: 'gw-sidecar-injector', ownerReferences: [{ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', name: owners.b, uid: ownerB.metadata!.uid! }] },
        webhooks: [{
          name: 'inject.gw.dev', admissionReviewVersions: ['v1'], sideEffects: 'None', failurePolicy: 'Ignore', clientConfig: legacy,
          namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: [operatorNs] }] },
        }],
      },
    });
    const a = await start('a');
    await untilInjecting(core, appNs.a);
    expect((await admission.readMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' })).metadata?.name).toBe('gw-sidecar-injector');
    const b = await start('b');
    await untilInjecting(core, appNs.b);
    await expect(admission.readMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' })).rejects.toMatchObject({ code: 404 });

    await waitFor('both lead, each by its own Lease', async () => a.isLeader() && b.isLeader(), 15_000);
    expect((await lease('a')).spec?.holderIdentity).toBe('operator-a');
    expect((await lease('b')).spec?.holderIdentity).toBe('operator-b');

    await expectOwnRegistration('a', a);
    await expectOwnRegistration('b', b);
    expect((await secret('a')).data?.['ca.crt']).not.toBe((await secret('b')).data?.['ca.crt']);

    expect(sidecarImage(await inject(appNs.a, 'acme-app'))).toBe('registry.example/gw-sidecar:a');
    expect(sidecarImage(await inject(appNs.b, 'edge-app'))).toBe('registry.example/gw-sidecar:b');
    // No operator compiles the APIs of a namespace neither watches: a gateway there would answer 404.
    expect(sidecarImage(await inject(unwatchedNs, 'unwatched-app'))).toBeUndefined();
  });

  it('leaves the other release injecting and leading when one is stopped and its objects removed', async () => {
    const [a, b] = running as [Operator, Operator];
    await b.stop();
    running.splice(1, 1);
    // What helm uninstall removes with the release (through their owners).
    await admission.deleteMutatingWebhookConfiguration({ name: `${releases.b}-sidecar-injector` });
    await leases.deleteNamespacedLease({ namespace: operatorNs, name: `${releases.b}-operator-leader` });
    await core.deleteNamespacedSecret({ namespace: operatorNs, name: `${releases.b}-webhook-tls` });

    await expectOwnRegistration('a', a);
    expect((await lease('a')).spec?.holderIdentity).toBe('operator-a');
    expect((await secret('a')).data?.['tls.crt']).toBeTruthy();
    expect(a.isLeader()).toBe(true);
    expect(sidecarImage(await inject(appNs.a, 'acme-app-after'))).toBe('registry.example/gw-sidecar:a');
  });
});
