import { createPrivateKey, X509Certificate } from 'node:crypto';
import { connect } from 'node:tls';
import { AdmissionregistrationV1Api, CoreV1Api, type V1Secret } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { issueCa, issueServing } from '../../../operator/webhook/certs.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { freePort, pod, startOperator, untilInjecting, waitFor } from './support.ts';

/** A watch event reaches every replica at once; a sync follows within two seconds of the one before. */
const HEALS_WITHIN_MS = 6_000;

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
  const listenPorts: number[] = [];
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
    listenPorts.push(listenPort);
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
  const readSecret = () => core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
  const readConfiguration = () => admission.readMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' });
  const fingerprint = (secret: V1Secret, key: string): string => new X509Certificate(Buffer.from(secret.data?.[key] ?? '', 'base64')).fingerprint256;
  const secretCa = async (): Promise<string> => fingerprint(await readSecret(), 'ca.crt');
  /** The fingerprint of the certificate a replica serves on its port. */
  const served = (port: number): Promise<string> => new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.on('error', reject);
  });
  /** Every replica serves the Secret's certificate. */
  const allServeTheSecret = async (): Promise<boolean> => {
    const wanted = fingerprint(await readSecret(), 'tls.crt');
    return (await Promise.all(listenPorts.map(served))).every((print) => print === wanted);
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
    await waitFor('every replica serving the new certificate', allServeTheSecret, HEALS_WITHIN_MS);
  });

  it('serves a certificate written to the Secret within seconds, on every replica, and pods go on being injected', async () => {
    const stored = await readSecret();
    const decode = (key: string) => Buffer.from(stored.data?.[key] ?? '', 'base64').toString('utf8');
    const next = await issueServing({ caCert: decode('ca.crt'), caKey: decode('ca.key') }, { dns: ['localhost'], ips: ['127.0.0.1'] });
    await core.replaceNamespacedSecret({
      namespace: operatorNs,
      name: 'gw-webhook-tls',
      body: { ...stored, data: { ...stored.data, 'tls.crt': Buffer.from(next.tlsCert).toString('base64'), 'tls.key': Buffer.from(next.tlsKey).toString('base64') } },
    });
    await waitFor('every replica serving the certificate written', allServeTheSecret, HEALS_WITHIN_MS);
    expect(fingerprint(await readSecret(), 'tls.crt')).toBe(new X509Certificate(next.tlsCert).fingerprint256);
    expect((await createPodsFor(500)).filter((outcome) => outcome !== 'injected')).toEqual([]);
  });

  it('re-issues a tls.key that is not the certificate\'s, written while running, within seconds', async () => {
    const stored = await readSecret();
    const stray = await issueServing(await issueCa(), { dns: ['localhost'], ips: ['127.0.0.1'] });
    await core.replaceNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls', body: { ...stored, data: { ...stored.data, 'tls.key': Buffer.from(stray.tlsKey).toString('base64') } } });
    await waitFor('a fitting pair in the Secret', async () => {
      const secret = await readSecret();
      const decode = (key: string) => Buffer.from(secret.data?.[key] ?? '', 'base64').toString('utf8');
      return new X509Certificate(decode('tls.crt')).checkPrivateKey(createPrivateKey(decode('tls.key')));
    }, HEALS_WITHIN_MS);
    expect((await readSecret()).data?.['ca.crt']).toBe(stored.data?.['ca.crt']);
    await waitFor('every replica serving the re-issued certificate', allServeTheSecret, HEALS_WITHIN_MS);
    expect((await createPodsFor(500)).filter((outcome) => outcome !== 'injected')).toEqual([]);
  });

  it('restores a hand-edited configuration within seconds, without a restart', async () => {
    const registered = await readConfiguration();
    const edited = structuredClone(registered);
    const hook = edited.webhooks![0]!;
    hook.clientConfig.caBundle = Buffer.from((await issueCa()).caCert).toString('base64');
    hook.failurePolicy = 'Ignore';
    hook.namespaceSelector = { matchLabels: { 'example.com/team': 'payments' } };
    await admission.replaceMutatingWebhookConfiguration({ name: 'gw-sidecar-injector', body: edited });
    const ca = await secretCa();
    await waitFor('the configuration restored', async () => {
      const now = (await readConfiguration()).webhooks?.[0];
      return now?.failurePolicy === 'Fail' && (await trusted())[0] === ca && JSON.stringify(now.namespaceSelector) === JSON.stringify(registered.webhooks?.[0]?.namespaceSelector);
    }, HEALS_WITHIN_MS);
    await untilInjecting(core, appNs);
  });

  it('registers a deleted configuration again within seconds', async () => {
    await admission.deleteMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' });
    await waitFor('the configuration registered again', () => readConfiguration().catch(() => undefined), HEALS_WITHIN_MS);
    await untilInjecting(core, appNs);
  });

  it('writes nothing when a change asks for a sync and nothing of what it keeps differs', async () => {
    const configuration = await readConfiguration();
    const secret = await readSecret();
    // An annotation of someone else's: the watches see a change, the replicas find theirs intact.
    await admission.replaceMutatingWebhookConfiguration({
      name: 'gw-sidecar-injector',
      body: { ...configuration, metadata: { ...configuration.metadata, annotations: { ...configuration.metadata?.annotations, 'example.com/note': 'hello' } } },
    });
    const annotated = (await readConfiguration()).metadata?.resourceVersion;
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect((await readConfiguration()).metadata?.resourceVersion).toBe(annotated);
    expect((await readSecret()).metadata?.resourceVersion).toBe(secret.metadata?.resourceVersion);
  });
});
