import { randomBytes } from 'node:crypto';
import { AppsV1Api, AuthorizationV1Api, CoreV1Api, type V1Secret } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { createNamespace, kubeConfig, kubectl } from '../../harness/index.ts';
import { CHART_DIR, helm, parseManifest, setArgs, type K8sObject } from './helm.ts';

/**
 * helm install / upgrade / uninstall against the run's real API server. No kubelet runs
 * here, so pods never start: what is checked is that every object is accepted and stored,
 * that each ServiceAccount may do what its component needs and not more (asked of the
 * API server's own authorizer with SubjectAccessReviews), and that upgrades keep secrets.
 */

// Without "gw" in the release name, object names are `<release>-gw-<component>`.
const release = `chart${randomBytes(3).toString('hex')}`;
const prefix = `${release}-gw`;
let ns: string;
let appNs: string;
let otherNs: string;
let manifest: K8sObject[];
const core = (): CoreV1Api => kubeConfig().makeApiClient(CoreV1Api);

const readSecret = (name: string, namespace = ns): Promise<V1Secret> => core().readNamespacedSecret({ name, namespace });
const decoded = (secret: V1Secret): Record<string, string> =>
  Object.fromEntries(Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]));

interface Access {
  verb: string;
  resource: string;
  group?: string;
  subresource?: string;
  name?: string;
  /** Namespace of the request; 'cluster' for cluster-wide. */
  namespace: 'release' | 'app' | 'other' | 'cluster';
}

async function allowed(account: string, access: Access): Promise<boolean> {
  const namespaces = { release: ns, app: appNs, other: otherNs, cluster: undefined };
  const saNamespace = account === 'gw-sidecar' ? appNs : ns;
  const review = await kubeConfig()
    .makeApiClient(AuthorizationV1Api)
    .createSubjectAccessReview({
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user: `system:serviceaccount:${saNamespace}:${account}`,
          groups: ['system:serviceaccounts', `system:serviceaccounts:${saNamespace}`, 'system:authenticated'],
          resourceAttributes: {
            verb: access.verb,
            resource: access.resource,
            group: access.group ?? '',
            subresource: access.subresource,
            name: access.name,
            namespace: namespaces[access.namespace],
          },
        },
      },
    });
  return review.status?.allowed === true;
}

const describeAccess = (a: Access): string =>
  `${a.verb} ${a.resource}${a.subresource ? `/${a.subresource}` : ''}${a.group ? `.${a.group}` : ''}${a.name ? ` ${a.name}` : ''} in ${a.namespace}`;

async function expectAccess(account: string, table: Array<[Access, boolean]>): Promise<void> {
  const results = await Promise.all(table.map(async ([access, want]) => ({ what: describeAccess(access), want, got: await allowed(account, access) })));
  expect(results.filter((r) => r.got !== r.want)).toEqual([]);
}

beforeAll(async () => {
  ns = await createNamespace('chart-install');
  appNs = await createNamespace('chart-app');
  otherNs = await createNamespace('chart-other');
  // The operator creates its webhook CA Secret at run time; the chart must never own or overwrite it.
  await core().createNamespacedSecret({
    namespace: ns,
    body: { metadata: { name: `${prefix}-webhook-tls`, labels: { 'app.kubernetes.io/managed-by': 'gw-operator' } }, stringData: { 'ca.crt': 'CA-PEM', 'ca.key': 'CA-KEY' } },
  });
  // The global setup applied the same CRDs already (the CRD check of chart-render compares them).
  const install = await helm(['install', release, CHART_DIR, '--namespace', ns, '--skip-crds', ...setArgs({ 'sidecar.namespaces': [appNs] })]);
  expect(install.stdout).toContain('STATUS: deployed');
  manifest = parseManifest((await helm(['get', 'manifest', release, '--namespace', ns])).stdout);
});

afterAll(async () => {
  if (ns) await helm(['uninstall', release, '--namespace', ns], { allowFail: true });
});

describe('helm install', () => {
  it('creates every object of the release on the API server', async () => {
    expect(manifest.length).toBeGreaterThanOrEqual(25);
    const input = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: manifest });
    const { stdout } = await kubectl(['get', '-f', '-', '-o', 'json'], { input });
    const stored = (JSON.parse(stdout) as { items: K8sObject[] }).items;
    const key = (o: K8sObject): string => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
    expect(stored.map(key).sort()).toEqual(manifest.map(key).sort());
    for (const o of stored) expect(o.metadata.labels?.['app.kubernetes.io/instance'], key(o)).toBe(release);
    const status = JSON.parse((await helm(['status', release, '--namespace', ns, '-o', 'json'])).stdout) as { info: { status: string } };
    expect(status.info.status).toBe('deployed');
  });

  it('prints the next commands in NOTES.txt', async () => {
    const { stdout } = await helm(['get', 'notes', release, '--namespace', ns]);
    // The commands use the namespace the values serve: this release's sidecar namespace, which exists.
    expect(stdout).toContain(`kubectl apply -n ${appNs} -f examples/`);
    expect(stdout).toContain(`kubectl get gw -n ${appNs}`);
    expect(stdout).not.toContain('kubectl create namespace');
    expect(stdout).toContain('kubectl get events -A --field-selector reason=RateLimitSmoothingUp');
    expect(stdout).toContain(`kubectl -n ${ns} port-forward service/${prefix}-admin 8081:8081`);
    expect(stdout).toContain(`kubectl -n ${ns} get secret ${prefix}-auth`);
    // This release names sidecar namespaces: the binding and env Secret are made there, nothing to tell.
    expect(stdout).not.toContain('create rolebinding');
    expect(stdout).not.toContain('An injected gateway also needs Secret');
    // Without sidecar namespaces, the notes say what an app namespace needs besides the binding.
    const bare = await helm(['install', 'notes-only', CHART_DIR, '--namespace', ns, '--skip-crds', '--dry-run=server']);
    expect(bare.stdout).toContain('kubectl -n demo create rolebinding gw-sidecar');
    expect(bare.stdout).toContain('An injected gateway also needs Secret gw-sidecar-env (its GW_REDIS_URL)');
    expect(bare.stdout).toContain(`helm upgrade notes-only <chart> -n ${ns} --reset-then-reuse-values --set 'sidecar.namespaces={demo}'`);
    expect(bare.stdout).toContain('kubectl create namespace demo');
    // Watching some namespaces only, the commands use the first, which the operator watches.
    const watching = await helm(['install', 'notes-watch', CHART_DIR, '--namespace', ns, '--skip-crds', '--dry-run=server', ...setArgs({ watchNamespaces: [appNs], 'admin.targetNamespace': appNs })]);
    expect(watching.stdout).toContain(`kubectl apply -n ${appNs} -f examples/`);
    expect(watching.stdout).toContain(`kubectl -n ${appNs} create rolebinding gw-sidecar`);
    expect(watching.stdout).toContain(`--reset-then-reuse-values --set 'sidecar.namespaces={${appNs}}'`);
    // Over HTTPS, the command calls a name the certificate can hold, sent to the port-forward.
    const tls = await helm(['install', 'notes-tls', CHART_DIR, '--namespace', ns, '--skip-crds', '--dry-run=server', ...setArgs({ 'admin.tls.secretName': 'gw-admin-tls' })]);
    const host = `notes-tls-gw-admin.${ns}.svc`;
    expect(tls.stdout).toContain(`curl -s --cacert ca.crt --resolve ${host}:8081:127.0.0.1 -X POST https://${host}:8081/admin/org/keys`);
    expect(tls.stdout).not.toContain('https://127.0.0.1');
  });

  it('lets the sidecar account read ConfigMaps and write Events in its namespace, and nothing of Secrets', async () => {
    await expectAccess('gw-sidecar', [
      [{ verb: 'get', resource: 'configmaps', namespace: 'app' }, true],
      [{ verb: 'list', resource: 'configmaps', namespace: 'app' }, true],
      [{ verb: 'watch', resource: 'configmaps', namespace: 'app' }, true],
      [{ verb: 'create', resource: 'events', group: 'events.k8s.io', namespace: 'app' }, true],
      [{ verb: 'patch', resource: 'events', group: 'events.k8s.io', namespace: 'app' }, true],
      [{ verb: 'get', resource: 'secrets', namespace: 'app' }, false],
      [{ verb: 'list', resource: 'secrets', namespace: 'app' }, false],
      // Its own env Secret reaches it through the kubelet (envFrom), not through the API.
      [{ verb: 'get', resource: 'secrets', name: 'gw-sidecar-env', namespace: 'app' }, false],
      [{ verb: 'get', resource: 'secrets', name: `${prefix}-auth`, namespace: 'release' }, false],
      [{ verb: 'create', resource: 'configmaps', namespace: 'app' }, false],
      [{ verb: 'update', resource: 'configmaps', namespace: 'app' }, false],
      [{ verb: 'get', resource: 'configmaps', namespace: 'other' }, false],
      [{ verb: 'delete', resource: 'events', group: 'events.k8s.io', namespace: 'app' }, false],
      [{ verb: 'get', resource: 'apidefinitions', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'keys', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'list', resource: 'pods', namespace: 'app' }, false],
    ]);
  });

  it('lets the operator reconcile gw.dev kinds, write configs, secrets and its lease, and manage only its own webhook', async () => {
    await expectAccess(`${prefix}-operator`, [
      [{ verb: 'list', resource: 'apidefinitions', group: 'gw.dev', namespace: 'cluster' }, true],
      [{ verb: 'watch', resource: 'policies', group: 'gw.dev', namespace: 'cluster' }, true],
      [{ verb: 'get', resource: 'portalproducts', group: 'gw.dev', namespace: 'app' }, true],
      [{ verb: 'update', resource: 'apidefinitions', group: 'gw.dev', subresource: 'status', namespace: 'app' }, true],
      [{ verb: 'patch', resource: 'keys', group: 'gw.dev', subresource: 'status', namespace: 'app' }, true],
      [{ verb: 'patch', resource: 'keys', group: 'gw.dev', namespace: 'app' }, true],
      [{ verb: 'update', resource: 'keys', group: 'gw.dev', subresource: 'finalizers', namespace: 'app' }, true],
      [{ verb: 'create', resource: 'configmaps', namespace: 'app' }, true],
      [{ verb: 'delete', resource: 'configmaps', namespace: 'app' }, true],
      [{ verb: 'create', resource: 'secrets', namespace: 'app' }, true],
      [{ verb: 'create', resource: 'events', group: 'events.k8s.io', namespace: 'app' }, true],
      // Events are written as events.k8s.io/v1 only; the core/v1 path stays closed.
      [{ verb: 'create', resource: 'events', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'leases', group: 'coordination.k8s.io', namespace: 'release' }, true],
      [{ verb: 'update', resource: 'leases', group: 'coordination.k8s.io', name: `${prefix}-operator-leader`, namespace: 'release' }, true],
      [{ verb: 'update', resource: 'leases', group: 'coordination.k8s.io', name: 'kube-scheduler', namespace: 'release' }, false],
      [{ verb: 'get', resource: 'secrets', name: `${prefix}-webhook-tls`, namespace: 'release' }, true],
      // Its certificate Secret and webhook configuration are watched by name.
      [{ verb: 'watch', resource: 'secrets', name: `${prefix}-webhook-tls`, namespace: 'release' }, true],
      [{ verb: 'list', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: `${prefix}-sidecar-injector`, namespace: 'cluster' }, true],
      [{ verb: 'watch', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: `${prefix}-sidecar-injector`, namespace: 'cluster' }, true],
      [{ verb: 'watch', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', namespace: 'cluster' }, false],
      // The names of another release's operator are not this one's.
      [{ verb: 'update', resource: 'leases', group: 'coordination.k8s.io', name: 'gw-operator-leader', namespace: 'release' }, false],
      [{ verb: 'update', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: 'gw-sidecar-injector', namespace: 'cluster' }, false],
      // Except to delete it when this release owns it: the one name every release had before (the operator checks the owner).
      [{ verb: 'delete', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: 'gw-sidecar-injector', namespace: 'cluster' }, true],
      [{ verb: 'create', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', namespace: 'cluster' }, true],
      [{ verb: 'update', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: `${prefix}-sidecar-injector`, namespace: 'cluster' }, true],
      // Forbidden samples: other webhooks, spec writes, other API groups, escalation paths.
      [{ verb: 'update', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: 'someone-elses', namespace: 'cluster' }, false],
      [{ verb: 'delete', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: `${prefix}-sidecar-injector`, namespace: 'cluster' }, false],
      [{ verb: 'create', resource: 'validatingwebhookconfigurations', group: 'admissionregistration.k8s.io', namespace: 'cluster' }, false],
      [{ verb: 'update', resource: 'apidefinitions', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'delete', resource: 'apidefinitions', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'policies', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'leases', group: 'coordination.k8s.io', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'pods', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'tokenreviews', group: 'authentication.k8s.io', namespace: 'cluster' }, false],
      [{ verb: 'create', resource: 'clusterroles', group: 'rbac.authorization.k8s.io', namespace: 'cluster' }, false],
      [{ verb: 'impersonate', resource: 'serviceaccounts', namespace: 'app' }, false],
      [{ verb: 'delete', resource: 'namespaces', namespace: 'cluster' }, false],
      [{ verb: 'get', resource: 'nodes', namespace: 'cluster' }, false],
    ]);
  });

  it('lets the admin gateway read gw.dev, review tokens, and write only what the admin operations write, all in its namespace', async () => {
    await expectAccess(`${prefix}-admin`, [
      [{ verb: 'list', resource: 'apidefinitions', group: 'gw.dev', namespace: 'release' }, true],
      [{ verb: 'get', resource: 'categories', group: 'gw.dev', namespace: 'release' }, true],
      [{ verb: 'watch', resource: 'portalproducts', group: 'gw.dev', namespace: 'release' }, true],
      [{ verb: 'create', resource: 'tokenreviews', group: 'authentication.k8s.io', namespace: 'cluster' }, true],
      [{ verb: 'create', resource: 'subjectaccessreviews', group: 'authorization.k8s.io', namespace: 'cluster' }, true],
      [{ verb: 'create', resource: 'keys', group: 'gw.dev', namespace: 'release' }, true],
      // A Key whose create outlived create-key's deadline is deleted when it lands.
      [{ verb: 'delete', resource: 'keys', group: 'gw.dev', namespace: 'release' }, true],
      [{ verb: 'patch', resource: 'portalproducts', group: 'gw.dev', namespace: 'release' }, true],
      [{ verb: 'delete', resource: 'apidefinitions', group: 'gw.dev', namespace: 'release' }, true],
      [{ verb: 'watch', resource: 'configmaps', namespace: 'release' }, true],
      [{ verb: 'patch', resource: 'configmaps', namespace: 'release' }, true],
      [{ verb: 'delete', resource: 'configmaps', namespace: 'release' }, true],
      [{ verb: 'create', resource: 'events', group: 'events.k8s.io', namespace: 'release' }, true],
      // Forbidden samples. Its resource store reads only the namespace it works in.
      [{ verb: 'list', resource: 'apidefinitions', group: 'gw.dev', namespace: 'cluster' }, false],
      [{ verb: 'get', resource: 'categories', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'events', namespace: 'release' }, false],
      [{ verb: 'get', resource: 'secrets', namespace: 'release' }, false],
      [{ verb: 'create', resource: 'configmaps', namespace: 'release' }, false],
      [{ verb: 'create', resource: 'keys', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'delete', resource: 'apidefinitions', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'delete', resource: 'configmaps', namespace: 'app' }, false],
      [{ verb: 'update', resource: 'keys', group: 'gw.dev', namespace: 'release' }, false],
      [{ verb: 'delete', resource: 'keys', group: 'gw.dev', namespace: 'app' }, false],
      [{ verb: 'create', resource: 'apidefinitions', group: 'gw.dev', namespace: 'release' }, false],
      [{ verb: 'patch', resource: 'apidefinitions', group: 'gw.dev', subresource: 'status', namespace: 'release' }, false],
      [{ verb: 'create', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', namespace: 'cluster' }, false],
      [{ verb: 'create', resource: 'leases', group: 'coordination.k8s.io', namespace: 'release' }, false],
      [{ verb: 'list', resource: 'pods', namespace: 'release' }, false],
    ]);
  });
});

describe('helm upgrade', () => {
  it('keeps the generated admin, portal and Redis secrets, leaves the webhook CA alone, and applies changed values', async () => {
    const authBefore = decoded(await readSecret(`${prefix}-auth`));
    const redisBefore = decoded(await readSecret(`${prefix}-redis`));
    const sidecarEnvBefore = decoded(await readSecret('gw-sidecar-env', appNs));
    expect(sidecarEnvBefore.GW_REDIS_URL).toBe(`redis://:${redisBefore.password}@${prefix}-redis.${ns}.svc:6379/0`);
    const caBefore = await readSecret(`${prefix}-webhook-tls`);
    expect(authBefore['admin-secret']).toMatch(/^[A-Za-z0-9]{40}$/);
    expect(authBefore['portal-secret']).toMatch(/^[A-Za-z0-9]{40}$/);

    const upgrade = await helm(['upgrade', release, CHART_DIR, '--namespace', ns, '--skip-crds', ...setArgs({ 'sidecar.namespaces': [appNs], 'gateway.settings.drl_threshold': 7, 'operator.replicas': 2 })]);
    expect(upgrade.stdout).toContain('REVISION: 2');

    expect(decoded(await readSecret(`${prefix}-auth`))).toEqual(authBefore);
    expect(decoded(await readSecret(`${prefix}-redis`))).toEqual(redisBefore);
    expect(decoded(await readSecret('gw-sidecar-env', appNs))).toEqual(sidecarEnvBefore);
    const caAfter = await readSecret(`${prefix}-webhook-tls`);
    expect(caAfter.metadata?.resourceVersion).toBe(caBefore.metadata?.resourceVersion);
    expect(decoded(caAfter)).toEqual({ 'ca.crt': 'CA-PEM', 'ca.key': 'CA-KEY' });
    expect(caAfter.metadata?.annotations?.['meta.helm.sh/release-name']).toBeUndefined();

    const settings = await core().readNamespacedConfigMap({ name: `${prefix}-settings`, namespace: ns });
    expect((parseYaml(settings.data?.['settings.yaml'] ?? '') as Record<string, unknown>).drl_threshold).toBe(7);
    const pdb = await kubectl(['get', 'poddisruptionbudget', `${prefix}-operator`, '-n', ns, '-o', 'jsonpath={.spec.maxUnavailable}']);
    expect(pdb.stdout).toBe('1');
  });

  it('replaces a secret only when a new value is given', async () => {
    const before = decoded(await readSecret(`${prefix}-auth`));
    await helm(['upgrade', release, CHART_DIR, '--namespace', ns, '--skip-crds', ...setArgs({ 'sidecar.namespaces': [appNs], 'auth.adminSecret': 'rotated-admin-secret' })]);
    const after = decoded(await readSecret(`${prefix}-auth`));
    expect(after['admin-secret']).toBe('rotated-admin-secret');
    expect(after['portal-secret']).toBe(before['portal-secret']);
  });

  it('refuses an upgrade with invalid values and leaves the release as it was', async () => {
    const before = (await core().readNamespacedConfigMap({ name: `${prefix}-settings`, namespace: ns })).metadata?.resourceVersion;
    const bad = await helm(['upgrade', release, CHART_DIR, '--namespace', ns, '--skip-crds', ...setArgs({ 'gateway.settings.redis_timeout_ms': 0 })], { allowFail: true });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("at '/gateway/settings/redis_timeout_ms'");
    const history = JSON.parse((await helm(['history', release, '--namespace', ns, '-o', 'json'])).stdout) as Array<{ revision: number; status: string }>;
    expect(history.map((h) => h.revision)).toEqual([1, 2, 3]);
    expect(history.at(-1)?.status).toBe('deployed');
    const after = (await core().readNamespacedConfigMap({ name: `${prefix}-settings`, namespace: ns })).metadata?.resourceVersion;
    expect(after).toBe(before);
  });

  it("refuses an upgrade that changes Redis's volume claims, saying how, and leaves the release as it was", async () => {
    const statefulSet = async () => (await kubeConfig().makeApiClient(AppsV1Api).readNamespacedStatefulSet({ name: `${prefix}-redis`, namespace: ns })).metadata?.resourceVersion;
    const before = await statefulSet();
    const revisions = async () => (JSON.parse((await helm(['history', release, '--namespace', ns, '-o', 'json'])).stdout) as unknown[]).length;
    const count = await revisions();
    const changes: Array<[Record<string, unknown>, string]> = [
      [{ 'redis.persistence.enabled': false }, 'enabled from true to false'],
      [{ 'redis.persistence.size': '2Gi' }, 'size from 1Gi to 2Gi'],
      [{ 'redis.persistence.storageClass': 'fast' }, 'storageClass from "" to "fast"'],
    ];
    for (const [values, change] of changes) {
      const refused = await helm(['upgrade', release, CHART_DIR, '--namespace', ns, '--skip-crds', '--reuse-values', ...setArgs(values)], { allowFail: true });
      expect(refused.code, JSON.stringify(values)).not.toBe(0);
      expect(refused.stderr).toContain(`redis.persistence: this upgrade changes ${change}, and Kubernetes refuses any change of a StatefulSet's volume claims; to change it, first run kubectl delete statefulset ${prefix}-redis -n ${ns} --cascade=orphan`);
    }
    expect(await revisions()).toBe(count);
    expect(await statefulSet()).toBe(before);
    // The same size written another way is no change.
    const same = await helm(['upgrade', release, CHART_DIR, '--namespace', ns, '--skip-crds', '--reuse-values', '--dry-run=server', ...setArgs({ 'redis.persistence.size': '1024Mi' })], { allowFail: true });
    expect([same.code, same.stderr]).toEqual([0, '']);
  });
});

describe('helm uninstall', () => {
  it('removes the release objects, cluster-scoped ones included, and keeps the operator-made CA Secret', async () => {
    const current = parseManifest((await helm(['get', 'manifest', release, '--namespace', ns])).stdout);
    expect(current.filter((o) => o.kind.startsWith('Cluster')).length).toBeGreaterThanOrEqual(8);
    await helm(['uninstall', release, '--namespace', ns]);
    const input = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: current });
    const left = await kubectl(['get', '-f', '-', '-o', 'name', '--ignore-not-found'], { input });
    expect(left.stdout.trim()).toBe('');
    expect(decoded(await readSecret(`${prefix}-webhook-tls`))).toEqual({ 'ca.crt': 'CA-PEM', 'ca.key': 'CA-KEY' });
  });
});
