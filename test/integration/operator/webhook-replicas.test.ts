import { X509Certificate } from 'node:crypto';
import { AdmissionregistrationV1Api, CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { freePort, pod, startOperator, untilInjecting } from './support.ts';

/**
 * Several replicas serve the webhook from one certificate Secret. Replica A's port is the
 * webhook URL, so every review reaches it; replica B listens too, as a replica behind the
 * Service would, and reacts to the same Secret and configuration.
 */
describe('operator: webhook certificate shared by replicas', () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const running: Operator[] = [];
  let operatorNs: string;
  let appNs: string;
  let urlPort: number;
  let created = 0;

  const start = async (listenPort: number): Promise<Operator> => {
    const operator = await startOperator(kc, {
      redisUrl: testEnv().redisUrl,
      watchNamespaces: appNs,
      namespace: operatorNs,
      webhook: 'true',
      webhookListen: `127.0.0.1:${listenPort}`,
      webhookUrl: `https://127.0.0.1:${urlPort}/mutate`,
      // Fail: a review the API server cannot make (a certificate it does not trust) refuses the pod.
      webhookFailurePolicy: 'Fail',
      sidecarImage: 'registry.example/gw-sidecar:test',
    });
    running.push(operator);
    return operator;
  };

  /** Dry-run creations of annotated pods for `ms`: what each came to ('injected', or the API server's refusal). */
  const createPodsFor = async (ms: number): Promise<string[]> => {
    const outcomes: string[] = [];
    for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 100))) {
      created += 1;
      outcomes.push(await core.createNamespacedPod({ namespace: appNs, dryRun: 'All', body: pod(`replicas-${created}`, { 'gw.dev/inject': 'true' }) }).then(
        (p) => (p.spec?.initContainers?.some((c) => c.name === 'gw-sidecar') ? 'injected' : 'not injected'),
        (err: unknown) => String((err as { body?: string }).body ?? err),
      ));
    }
    return outcomes;
  };

  const trusted = async (): Promise<string[]> => {
    const config = await admission.readMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' });
    const bundle = Buffer.from(config.webhooks?.[0]?.clientConfig.caBundle ?? '', 'base64').toString('utf8');
    return (bundle.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? []).map((pem) => new X509Certificate(pem).fingerprint256);
  };
  const secretCa = async (): Promise<string> => {
    const secret = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    return new X509Certificate(Buffer.from(secret.data?.['ca.crt'] ?? '', 'base64')).fingerprint256;
  };

  beforeAll(async () => {
    operatorNs = await createNamespace('replicas-system');
    appNs = await createNamespace('replicas-apps');
    urlPort = await freePort();
    await start(urlPort);
    await untilInjecting(core, appNs);
  });

  afterAll(async () => {
    await Promise.all(running.map((operator) => operator.stop()));
    await admission.deleteMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' }).catch(() => undefined);
  });

  it('keeps trusting the CA a replica still serves under when another issues a new one for a deleted Secret', async () => {
    const oldCa = await secretCa();
    await core.deleteNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    await start(await freePort());
    const newCa = await secretCa();
    expect(newCa).not.toBe(oldCa);
    const cas = await trusted();
    expect(cas[0]).toBe(newCa);
    expect(cas).toContain(oldCa);
    expect(cas.length).toBeLessThanOrEqual(3);
    const outcomes = await createPodsFor(3_000);
    expect(outcomes.filter((outcome) => outcome !== 'injected')).toEqual([]);
  });
});
