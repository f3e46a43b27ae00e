import { createPrivateKey, X509Certificate } from 'node:crypto';
import { createServer as createHttps, type Server } from 'node:https';
import { AdmissionregistrationV1Api, CoreV1Api, type V1Container, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Operator } from '../../../operator/operator.ts';
import { issueCa, issueServing } from '../../../operator/webhook/certs.ts';
import { webhookConfiguration } from '../../../operator/webhook/webhook-configuration.ts';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { freePort, pod, startOperator, untilInjecting } from './support.ts';

/** gw_operator_webhook_reviews_total of one operator, by result. */
async function reviews(operator: Operator): Promise<{ injected: number; unchanged: number }> {
  const values = (await operator.metrics.webhookReviews.get()).values;
  const of = (result: string): number => values.find((v) => v.labels.result === result)?.value ?? 0;
  return { injected: of('injected'), unchanged: of('unchanged') };
}

function expectUnchanged(created: V1Pod): void {
  expect(created.spec?.initContainers ?? []).toEqual([]);
  expect(created.metadata?.annotations?.['gw.dev/injected']).toBeUndefined();
  expect(created.metadata?.labels).toBeUndefined();
  expect(created.spec?.containers.map((c) => c.name)).toEqual(['app']);
}

function expectSidecar(sidecar: V1Container | undefined): void {
  expect(sidecar).toBeDefined();
  const c = sidecar!;
  const env = new Map((c.env ?? []).map((e) => [e.name, e.value ?? e.valueFrom?.fieldRef?.fieldPath]));
  expect(c.name).toBe('gw-sidecar');
  expect(c.restartPolicy).toBe('Always');
  expect(c.image).toBe('registry.example/gw-sidecar:test');
  expect(env.get('GW_APIS')).toBe('orders,users');
  expect(env.get('GW_INSTANCE_ID')).toBe('metadata.name');
  expect(env.get('GW_NAMESPACE')).toBe('metadata.namespace');
  expect(env.get('GW_REDIS_URL')).toBe(testEnv().redisUrl);
  expect((c.ports ?? []).map((p) => p.containerPort)).toEqual([8080, 8081, 8082]);
  expect(c.readinessProbe).toMatchObject({ httpGet: { path: '/readyz', port: 'gw-health' } });
  expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsNonRoot: true });
}

describe('operator: sidecar injection webhook', () => {
  const kc = kubeConfig();
  const core = kc.makeApiClient(CoreV1Api);
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  let operatorNs: string;
  let appNs: string;
  let operator: Operator;

  beforeAll(async () => {
    operatorNs = await createNamespace('operator-system');
    appNs = await createNamespace('operator-apps');
    const port = await freePort();
    operator = await startOperator(kc, {
      redisUrl: testEnv().redisUrl,
      watchNamespaces: appNs,
      namespace: operatorNs,
      webhook: 'true',
      webhookListen: `127.0.0.1:${port}`,
      webhookUrl: `https://127.0.0.1:${port}/mutate`,
      // Ignore: if this test dies mid-way, pod creation elsewhere in the run is not blocked.
      webhookFailurePolicy: 'Ignore',
      sidecarImage: 'registry.example/gw-sidecar:test',
      sidecarImagePullPolicy: 'IfNotPresent',
      sidecarResources: '{"requests":{"cpu":"100m","memory":"96Mi"},"limits":{"memory":"384Mi"}}',
      sidecarNodeOptions: '--max-semi-space-size=8 --max-old-space-size=240',
      sidecarServiceAccount: 'gw-sidecar',
    });
    await untilInjecting(core, appNs);
  });

  afterAll(async () => {
    await operator?.stop();
    await admission.deleteMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' }).catch(() => undefined);
  });

  it('registers itself with the API server, trusting the CA it created', async () => {
    const config = await admission.readMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' });
    const hook = config.webhooks?.[0];
    expect(hook?.failurePolicy).toBe('Ignore');
    expect(hook?.clientConfig.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/mutate$/);
    expect(hook?.rules?.[0]).toMatchObject({ operations: ['CREATE'], resources: ['pods'] });
    const secret = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    const bundle = Buffer.from(hook?.clientConfig.caBundle ?? '', 'base64').toString('utf8');
    expect(bundle).toContain(Buffer.from(secret.data?.['ca.crt'] ?? '', 'base64').toString('utf8'));
    expect(secret.data?.['tls.key']).toBeTruthy();
  });

  it('injects the gateway into an annotated pod created through the API, and leaves other pods unchanged', async () => {
    const before = await reviews(operator);
    const injected = await core.createNamespacedPod({
      namespace: appNs,
      body: pod('with-gateway', { 'gw.dev/inject': 'true', 'gw.dev/apis': 'orders,users' }),
    });
    expectSidecar(injected.spec?.initContainers?.[0]);
    expect(injected.metadata?.annotations?.['gw.dev/injected']).toBe('true');
    expect(injected.metadata?.labels).toEqual({ 'gw.dev/gateway': 'true' });
    expect(injected.spec?.containers.map((c) => c.name)).toEqual(['app']);
    const stored = await core.readNamespacedPod({ namespace: appNs, name: 'with-gateway' });
    expect(stored.spec?.initContainers?.map((c) => c.name)).toEqual(['gw-sidecar']);

    expectUnchanged(await core.createNamespacedPod({ namespace: appNs, body: pod('without-gateway') }));
    expectUnchanged(await core.createNamespacedPod({ namespace: appNs, body: pod('declines-gateway', { 'gw.dev/inject': 'false' }) }));
    // Counted for gw_operator_webhook_reviews_total: the pods that did not ask never reached it.
    const after = await reviews(operator);
    expect(after.injected - before.injected).toBe(1);
    expect(after.unchanged - before.unchanged).toBe(0);
  });

  it('is not called for a pod that does not ask for a gateway: with no operator answering and failurePolicy Fail, only such pods are refused', async () => {
    // A second configuration like the operator's, pointing at a port nobody listens on, and
    // kept to this test's own namespace so that no other pod of the run can meet it.
    const downNs = await createNamespace('operator-down');
    const closedPort = await freePort();
    const down = webhookConfiguration({ name: 'gw-test-operator-down', url: `https://127.0.0.1:${closedPort}/mutate`, failurePolicy: 'Fail', excludedNamespaces: ['kube-system'], watchNamespaces: [downNs] }, Buffer.from('unused').toString('base64'));
    const hook = down.webhooks![0]!;
    hook.name = 'down.inject.gw.dev';
    await admission.createMutatingWebhookConfiguration({ body: down });
    try {
      const create = (name: string, annotations?: Record<string, string>): Promise<unknown> =>
        core.createNamespacedPod({ namespace: downNs, dryRun: 'All', body: pod(name, annotations) }).then(
          () => 'created',
          (err: unknown) => String((err as { body?: string }).body ?? err),
        );
      // The API server reads a new configuration from its cache a moment after the write.
      let asked: unknown = 'created';
      for (let attempt = 0; attempt < 40 && asked === 'created'; attempt++) {
        asked = await create(`asks-${attempt}`, { 'gw.dev/inject': 'true' });
        if (asked === 'created') await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(asked).toMatch(/failed calling webhook \\"down\.inject\.gw\.dev\\"/);
      expect(await create('plain')).toBe('created');
      expect(await create('declines', { 'gw.dev/inject': 'false' })).toBe('created');
      expect(await create('declines-as-the-label', { 'gw.dev/inject': 'disabled' })).toBe('created');
      expect(await create('misspelt-key', { 'gw.dev/injects': 'true' })).toMatch(/denied the request|failed calling webhook/);
      // A value the injector would refuse reaches the webhooks (the test's own operator refuses it first).
      expect(await create('misspelt', { 'gw.dev/inject': 'yes' })).toMatch(/denied the request|failed calling webhook/);
      expect(await create('other-annotations', { 'example.com/team': 'payments' })).toBe('created');
      // A namespace labelled gw.dev/inject=false opts out as one labelled disabled: its pods are not sent.
      const namespace = await core.readNamespace({ name: downNs });
      namespace.metadata!.labels = { ...namespace.metadata!.labels, 'gw.dev/inject': 'false' };
      await core.replaceNamespace({ name: downNs, body: namespace });
      let labelled: unknown = 'refused';
      for (let attempt = 0; attempt < 40 && labelled !== 'created'; attempt++) {
        labelled = await create(`labelled-ns-${attempt}`, { 'gw.dev/inject': 'true' });
        if (labelled !== 'created') await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(labelled).toBe('created');
    } finally {
      await admission.deleteMutatingWebhookConfiguration({ name: 'gw-test-operator-down' });
    }
  });

  it('sizes the sidecar by the operator\'s default and the pod\'s annotations (V8\'s old space in proportion), with the configured pull policy', async () => {
    const nodeOptions = (p: V1Pod) => p.spec?.initContainers?.[0]?.env?.find((e) => e.name === 'NODE_OPTIONS')?.value;
    const standard = await core.createNamespacedPod({ namespace: appNs, body: pod('standard-size', { 'gw.dev/inject': 'true' }) });
    expect(standard.spec?.initContainers?.[0]?.resources).toEqual({ requests: { cpu: '100m', memory: '96Mi' }, limits: { memory: '384Mi' } });
    expect(nodeOptions(standard)).toBe('--max-semi-space-size=8 --max-old-space-size=240');
    expect(standard.spec?.initContainers?.[0]?.imagePullPolicy).toBe('IfNotPresent');
    const sized = await core.createNamespacedPod({
      namespace: appNs,
      body: pod('own-size', { 'gw.dev/inject': 'true', 'gw.dev/sidecar-cpu-limit': '500m', 'gw.dev/sidecar-memory-limit': '64Mi' }),
    });
    // The API server stores quantities in canonical form; the default memory request came down to the limit.
    expect(sized.spec?.initContainers?.[0]?.resources).toEqual({ requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '500m', memory: '64Mi' } });
    // 240 MiB of 384Mi is 40 MiB of 64Mi.
    expect(nodeOptions(sized)).toBe('--max-semi-space-size=8 --max-old-space-size=40');
    // Every form of a quantity the API server takes is taken: it stores them canonical.
    const forms = await core.createNamespacedPod({
      namespace: appNs,
      body: pod('quantity-forms', { 'gw.dev/inject': 'true', 'gw.dev/sidecar-cpu-limit': '.5', 'gw.dev/sidecar-memory-limit': '2e8', 'gw.dev/sidecar-memory-request': '+64Mi' }),
    });
    expect(forms.spec?.initContainers?.[0]?.resources).toEqual({ requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '500m', memory: '200e6' } });
    const absurd = core.createNamespacedPod({ namespace: appNs, body: pod('absurd-size', { 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-limit': '1000Ei' }) });
    await expect(absurd).rejects.toThrow(/gw\.dev\/sidecar-memory-limit: the gw-sidecar memory limit 1000Ei is above 1Ti/);
    const attempt = core.createNamespacedPod({ namespace: appNs, body: pod('bad-size', { 'gw.dev/inject': 'true', 'gw.dev/sidecar-memory-request': 'plenty' }) });
    await expect(attempt).rejects.toMatchObject({ code: 400 });
    await expect(attempt).rejects.toThrow(/gw\.dev\/sidecar-memory-request/);
    await expect(core.readNamespacedPod({ namespace: appNs, name: 'bad-size' })).rejects.toMatchObject({ code: 404 });
  });

  it('refuses a pod whose api list is invalid, saying why, and stores nothing', async () => {
    const attempt = core.createNamespacedPod({ namespace: appNs, body: pod('bad-apis', { 'gw.dev/inject': 'true', 'gw.dev/apis': 'a;rm -rf' }) });
    await expect(attempt).rejects.toMatchObject({ code: 400 });
    await expect(attempt).rejects.toThrow(/gw\.dev\/apis/);
    await expect(core.readNamespacedPod({ namespace: appNs, name: 'bad-apis' })).rejects.toMatchObject({ code: 404 });
    const misspelt = core.createNamespacedPod({ namespace: appNs, body: pod('inject-yes', { 'gw.dev/inject': 'yes' }) });
    await expect(misspelt).rejects.toMatchObject({ code: 400 });
    await expect(misspelt).rejects.toThrow(/gw\.dev\/inject must be \W+true\W+ \(inject the gateway\) or \W+false\W+, got \W+yes/);
    // A misspelt key would be ignored, and the pod serve every API.
    const unknownKey = core.createNamespacedPod({ namespace: appNs, body: pod('api-singular', { 'gw.dev/inject': 'true', 'gw.dev/api': 'orders' }) });
    await expect(unknownKey).rejects.toMatchObject({ code: 400 });
    await expect(unknownKey).rejects.toThrow(/annotation gw\.dev\/api is not one gw knows \(gw owns the gw\.dev\/ prefix\); the known ones are gw\.dev\/inject, gw\.dev\/apis, /);
    // A misspelt gw.dev/inject alone reaches the webhook too: the pod would otherwise run with no gateway.
    const injects = core.createNamespacedPod({ namespace: appNs, body: pod('injects', { 'gw.dev/injects': 'true' }) });
    await expect(injects).rejects.toMatchObject({ code: 400 });
    await expect(injects).rejects.toThrow(/annotation gw\.dev\/injects is not one gw knows/);
    await expect(core.readNamespacedPod({ namespace: appNs, name: 'injects' })).rejects.toMatchObject({ code: 404 });
  });

  it('gives the sidecar its own token though the pod turns automounting off, and warns of a ServiceAccount not granted its access', async () => {
    const body = pod('no-automount', { 'gw.dev/inject': 'true' });
    body.spec = { ...body.spec!, automountServiceAccountToken: false, serviceAccountName: 'shop' };
    const created = await core.createNamespacedPodWithHttpInfo({ namespace: appNs, body });
    expect(created.headers.warning).toContain('gw-sidecar runs as ServiceAccount shop, which needs get, list and watch on configmaps and create on events.k8s.io events in this namespace; the chart grants them to gw-sidecar');
    const stored = await core.readNamespacedPod({ namespace: appNs, name: 'no-automount' });
    expect(stored.spec?.volumes?.map((v) => v.name)).toEqual(['gw-sidecar-token']);
    expect(stored.spec?.volumes?.[0]?.projected?.sources?.map((source) => Object.keys(source)[0])).toEqual(['serviceAccountToken', 'configMap', 'downwardAPI']);
    expect(stored.spec?.initContainers?.[0]?.volumeMounts).toEqual([{ name: 'gw-sidecar-token', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }]);
    expect(stored.spec?.containers[0]?.volumeMounts).toBeUndefined();
    expect(stored.spec?.automountServiceAccountToken).toBe(false);
    // Run as the sidecar's own ServiceAccount, no warning.
    const asSidecar = pod('as-sidecar-account', { 'gw.dev/inject': 'true' });
    asSidecar.spec = { ...asSidecar.spec!, serviceAccountName: 'gw-sidecar' };
    expect((await core.createNamespacedPodWithHttpInfo({ namespace: appNs, body: asSidecar })).headers.warning).toBeUndefined();
  });

  it('refuses a pod on the node\'s network, saying why, and stores nothing', async () => {
    const body = pod('host-network', { 'gw.dev/inject': 'true' });
    body.spec = { ...body.spec!, hostNetwork: true };
    const attempt = core.createNamespacedPod({ namespace: appNs, body });
    await expect(attempt).rejects.toMatchObject({ code: 400 });
    await expect(attempt).rejects.toThrow(/the pod uses the node's network \(spec\.hostNetwork: true\): the gateway sidecar would listen on ports 8080, 8081, 8082 of the node/);
    await expect(core.readNamespacedPod({ namespace: appNs, name: 'host-network' })).rejects.toMatchObject({ code: 404 });
  });

  it("refuses a pod whose app names a port gw-proxy, which a Service's targetPort would pick past the gateway, and stores nothing", async () => {
    const body = pod('named-gw-proxy', { 'gw.dev/inject': 'true' });
    body.spec = { ...body.spec!, containers: body.spec!.containers.map((c) => ({ ...c, ports: [{ name: 'gw-proxy', containerPort: 9000 }] })) };
    const attempt = core.createNamespacedPod({ namespace: appNs, body });
    await expect(attempt).rejects.toMatchObject({ code: 400 });
    await expect(attempt).rejects.toThrow(/declares a port named gw-proxy, the name of a port of the gateway sidecar/);
    await expect(core.readNamespacedPod({ namespace: appNs, name: 'named-gw-proxy' })).rejects.toMatchObject({ code: 404 });
  });

  it('re-invoked after a later webhook, keeps the sidecar first and refuses a container that webhook added on its ports', async () => {
    // A webhook called after gw's (configurations are called by name): it puts an init container
    // first, and, when the pod asks, adds a container on port 8080.
    const ca = await issueCa();
    const serving = await issueServing(ca, { dns: [], ips: ['127.0.0.1'] });
    const later: Server = createHttps({ cert: serving.tlsCert, key: serving.tlsKey }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const { request } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { request: { uid: string; object: V1Pod } };
        const spec = request.object.spec!;
        const patch: unknown[] = [];
        if (!(spec.initContainers ?? []).some((c) => c.name === 'later-init')) {
          const init = { name: 'later-init', image: 'registry.example/init:1' };
          patch.push(spec.initContainers ? { op: 'add', path: '/spec/initContainers/0', value: init } : { op: 'add', path: '/spec/initContainers', value: [init] });
        }
        if (request.object.metadata?.annotations?.['example.com/metrics'] && !spec.containers.some((c) => c.name === 'metrics')) {
          patch.push({ op: 'add', path: '/spec/containers/-', value: { name: 'metrics', image: 'registry.example/metrics:1', ports: [{ containerPort: 8080 }] } });
        }
        const response = { uid: request.uid, allowed: true, ...(patch.length > 0 ? { patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') } : {}) };
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response }));
      });
    });
    const port = await freePort();
    await new Promise<void>((resolve) => later.listen(port, '127.0.0.1', resolve));
    const name = 'zz-gw-test-later';
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name },
        webhooks: [{
          name: 'later.test.gw.dev', admissionReviewVersions: ['v1'], sideEffects: 'None', failurePolicy: 'Fail', reinvocationPolicy: 'Never',
          clientConfig: { url: `https://127.0.0.1:${port}/mutate`, caBundle: Buffer.from(ca.caCert).toString('base64') },
          rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }],
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': appNs } },
          matchConditions: [{ name: 'later-test-pods', expression: "has(object.metadata.annotations) && 'example.com/later' in object.metadata.annotations" }],
        }],
      },
    });
    try {
      const create = (podName: string, annotations: Record<string, string>) => core.createNamespacedPod({ namespace: appNs, dryRun: 'All', body: pod(podName, { 'gw.dev/inject': 'true', 'example.com/later': 'true', ...annotations }) });
      // The API server reads a new configuration from its cache a moment after the write.
      let created: V1Pod | undefined;
      for (let attempt = 0; attempt < 40; attempt++) {
        created = await create(`later-${attempt}`, {});
        if (created.spec?.initContainers?.some((c) => c.name === 'later-init')) break;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(created?.spec?.initContainers?.map((c) => c.name)).toEqual(['gw-sidecar', 'later-init']);
      const clash = create('later-metrics', { 'example.com/metrics': 'true' });
      await expect(clash).rejects.toMatchObject({ code: 400 });
      await expect(clash).rejects.toThrow(/container metrics declares port 8080, which the gateway sidecar listens on/);
    } finally {
      await admission.deleteMutatingWebhookConfiguration({ name });
      await new Promise((resolve) => later.close(resolve));
    }
  });

  it('leaves a mirror pod alone, and a pod labelled gw.dev/inject=false, as one annotated so', async () => {
    const mirror = pod('static-app', { 'gw.dev/inject': 'true', 'kubernetes.io/config.mirror': 'hash' });
    mirror.spec = { ...mirror.spec!, nodeName: 'node-1' };
    expectUnchanged(await core.createNamespacedPod({ namespace: appNs, body: mirror }));
    const labelled = pod('labelled-false', { 'gw.dev/inject': 'true' });
    labelled.metadata = { ...labelled.metadata, labels: { 'gw.dev/inject': 'false' } };
    const created = await core.createNamespacedPod({ namespace: appNs, body: labelled });
    expect(created.spec?.initContainers ?? []).toEqual([]);
    expect(created.metadata?.annotations?.['gw.dev/injected']).toBeUndefined();
  });

  it('reuses the stored certificate on restart', async () => {
    const before = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    operator = await restart(operator);
    const after = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    expect(after.data?.['tls.crt']).toBe(before.data?.['tls.crt']);
    const again = await core.createNamespacedPod({ namespace: appNs, body: pod('after-restart', { 'gw.dev/inject': 'true' }) });
    expect(again.spec?.initContainers?.[0]?.name).toBe('gw-sidecar');
  });

  it('repairs hand edits of the fields it sets, and writes nothing when nothing changed', async () => {
    const read = () => admission.readMutatingWebhookConfiguration({ name: 'gw-sidecar-injector' });
    const registered = await read();
    operator = await restart(operator);
    expect((await read()).metadata?.resourceVersion).toBe(registered.metadata?.resourceVersion);

    const edited = structuredClone(registered);
    const hook = edited.webhooks![0]!;
    hook.clientConfig.caBundle = Buffer.from((await issueCa()).caCert).toString('base64');
    hook.objectSelector = { matchLabels: { 'example.com/team': 'payments' } };
    hook.timeoutSeconds = 30;
    await admission.replaceMutatingWebhookConfiguration({ name: 'gw-sidecar-injector', body: edited });
    operator = await restart(operator);
    const repaired = await read();
    // The Secret's CA first again; a CA like the webhook's stays trusted after it (certs.ts, trustedCas).
    const pem = (config: typeof registered) => Buffer.from(config.webhooks?.[0]?.clientConfig.caBundle ?? '', 'base64').toString('utf8');
    expect(pem(repaired).startsWith(pem(registered))).toBe(true);
    expect(repaired.webhooks?.[0]?.objectSelector).toEqual(registered.webhooks?.[0]?.objectSelector);
    expect(repaired.webhooks?.[0]?.timeoutSeconds).toBe(5);
    const injected = await core.createNamespacedPod({ namespace: appNs, body: pod('after-hand-edit', { 'gw.dev/inject': 'true' }) });
    expect(injected.spec?.initContainers?.[0]?.name).toBe('gw-sidecar');
  });

  it('re-issues a serving certificate that no longer fits, keeping the CA, and serves the new one', async () => {
    const stored = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    const decode = (key: string) => Buffer.from(stored.data?.[key] ?? '', 'base64').toString('utf8');
    const wrongNames = await issueServing({ caCert: decode('ca.crt'), caKey: decode('ca.key') }, { dns: ['elsewhere.example'], ips: ['10.9.9.9'] });
    await core.replaceNamespacedSecret({
      namespace: operatorNs,
      name: 'gw-webhook-tls',
      body: { ...stored, data: { ...stored.data, 'tls.crt': Buffer.from(wrongNames.tlsCert).toString('base64'), 'tls.key': Buffer.from(wrongNames.tlsKey).toString('base64') } },
    });
    operator = await restart(operator);
    const rotated = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    const cert = new X509Certificate(Buffer.from(rotated.data?.['tls.crt'] ?? '', 'base64'));
    expect(cert.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(rotated.data?.['ca.crt']).toBe(stored.data?.['ca.crt']);
    const injected = await core.createNamespacedPod({ namespace: appNs, body: pod('after-rotation', { 'gw.dev/inject': 'true' }) });
    expect(injected.spec?.initContainers?.[0]?.name).toBe('gw-sidecar');
  });

  it('re-issues a serving pair whose key is not the certificate\'s, keeping the CA, and serves it', async () => {
    const stored = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    const stray = await issueServing(await issueCa(), { dns: ['localhost'], ips: ['127.0.0.1'] });
    await core.replaceNamespacedSecret({
      namespace: operatorNs,
      name: 'gw-webhook-tls',
      body: { ...stored, data: { ...stored.data, 'tls.key': Buffer.from(stray.tlsKey).toString('base64') } },
    });
    operator = await restart(operator);
    const reissued = await core.readNamespacedSecret({ namespace: operatorNs, name: 'gw-webhook-tls' });
    const decode = (key: string) => Buffer.from(reissued.data?.[key] ?? '', 'base64').toString('utf8');
    expect(new X509Certificate(decode('tls.crt')).checkPrivateKey(createPrivateKey(decode('tls.key')))).toBe(true);
    expect(reissued.data?.['ca.crt']).toBe(stored.data?.['ca.crt']);
    const injected = await core.createNamespacedPod({ namespace: appNs, body: pod('after-key-mismatch', { 'gw.dev/inject': 'true' }) });
    expect(injected.spec?.initContainers?.[0]?.name).toBe('gw-sidecar');
  });
});

async function restart(previous: Operator): Promise<Operator> {
  const port = previous.options.webhookListen;
  await previous.stop();
  const next = await startOperator(kubeConfig(), { ...restartOptions(previous), webhookListen: port });
  await untilInjecting(kubeConfig().makeApiClient(CoreV1Api), next.options.watchNamespaces[0]!);
  return next;
}

function restartOptions(previous: Operator) {
  const o = previous.options;
  return {
    redisUrl: o.redisUrl,
    watchNamespaces: o.watchNamespaces.join(','),
    namespace: o.namespace,
    webhook: 'true',
    webhookUrl: o.webhookUrl,
    webhookFailurePolicy: o.webhookFailurePolicy,
    sidecarImage: o.sidecarImage,
  } as const;
}
