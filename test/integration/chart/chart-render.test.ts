import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { defaultGatewaySettings, gatewaySettingsSchema } from '../../../crds/settings.ts';
import { parseOptions, type OperatorOptions } from '../../../operator/options.ts';
import { releaseNames } from '../../../operator/runtime/release-names.ts';
import { webhookConfiguration } from '../../../operator/webhook/webhook-configuration.ts';
import { webhookTarget } from '../../../operator/webhook/webhook-runner.ts';
import { memoryLimitProblem } from '../../../operator/webhook/sidecar-resources.ts';
import { GATEWAY_POD_LABEL } from '../../../operator/webhook/injector.ts';
import { createNamespace, kubectl } from '../../harness/index.ts';
import { runTool } from '../../harness/run-tool.ts';
import { CHART_DIR, containerEnv, envValue, findObject, helm, parseManifest, podSpecs, renderChart, setArgs, type K8sObject } from './helm.ts';

/**
 * The chart as rendered by the pinned helm: lint, values schema, and every rendered object
 * validated by the real API server (server-side dry run, strict field validation), for the
 * default values and the non-default shapes a user picks (external, sentinel and cluster
 * Redis, watched namespaces, changed settings).
 */

let ns: string;
let appNs: string;

beforeAll(async () => {
  ns = await createNamespace('chart-render');
  appNs = await createNamespace('chart-app');
  // The API server's PodSecurity admission then warns about any pod template of the chart
  // that breaks the restricted profile, and serverValidate fails on any warning.
  await kubectl(['label', 'namespace', ns, 'pod-security.kubernetes.io/enforce=restricted', 'pod-security.kubernetes.io/warn=restricted']);
});

async function serverValidate(objects: K8sObject[]): Promise<void> {
  // JSON, not YAML: kubectl reads YAML 1.1, where the chart's quoted "yes" would turn back into a boolean.
  const input = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects });
  const result = await kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], { input, allowFail: true });
  expect(result.stderr).toBe('');
  expect(result.code).toBe(0);
  expect(result.stdout.trim().split('\n')).toHaveLength(objects.length);
}

function kinds(objects: K8sObject[]): string[] {
  return objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();
}

describe('helm lint', () => {
  it('passes with default values, also with --strict', async () => {
    const plain = await helm(['lint', CHART_DIR]);
    expect(plain.stdout).toContain('1 chart(s) linted, 0 chart(s) failed');
    const strict = await helm(['lint', '--strict', CHART_DIR]);
    expect(strict.stdout).toContain('0 chart(s) failed');
    expect(strict.stdout).not.toMatch(/\[(WARNING|ERROR)\]/);
  });

  it('passes --strict with non-default values', async () => {
    const values = {
      'redis.enabled': false,
      'redis.external.mode': 'sentinel',
      'redis.external.nodes': ['s1.redis:26379', 's2.redis:26379'],
      watchNamespaces: ['a', 'b'],
      'admin.targetNamespace': 'a',
      'operator.replicas': 2,
    };
    const strict = await helm(['lint', '--strict', CHART_DIR, ...setArgs(values)]);
    expect(strict.stdout).toContain('0 chart(s) failed');
  });

  it('fails on values the schema rejects', async () => {
    const result = await helm(['lint', CHART_DIR, ...setArgs({ 'gateway.settings.forwarder': 'nginx' })], { allowFail: true });
    expect(result.code).not.toBe(0);
    expect(result.stdout).toContain("[ERROR] values.yaml: - at '/gateway/settings/forwarder': value must be one of 'undici', 'http-proxy'");
  });
});

describe('helm template with default values', () => {
  let objects: K8sObject[];
  beforeAll(async () => {
    objects = await renderChart(ns, { 'sidecar.namespaces': [appNs] });
  });

  it('renders every component, and the API server accepts every object', async () => {
    expect(kinds(objects)).toEqual(
      [
        'ClusterRole/gw-admin-read',
        'ClusterRole/gw-admin-review',
        'ClusterRole/gw-operator',
        'ClusterRole/gw-operator-webhook',
        'ClusterRole/gw-sidecar',
        'ClusterRoleBinding/gw-admin-review',
        'ClusterRoleBinding/gw-operator',
        'ClusterRoleBinding/gw-operator-webhook',
        'ConfigMap/gw-settings',
        'Deployment/gw-admin',
        'Deployment/gw-operator',
        'Role/gw-admin',
        'Role/gw-operator',
        'RoleBinding/gw-admin',
        'RoleBinding/gw-admin-read',
        'RoleBinding/gw-operator',
        'RoleBinding/gw-sidecar',
        'Secret/gw-auth',
        'Secret/gw-redis',
        'Secret/gw-sidecar-env',
        'Service/gw-admin',
        'Service/gw-redis',
        'Service/gw-redis-headless',
        'Service/gw-webhook',
        'ServiceAccount/gw-admin',
        'ServiceAccount/gw-operator',
        'ServiceAccount/gw-sidecar',
        'StatefulSet/gw-redis',
      ].sort(),
    );
    await serverValidate(objects);
  });

  it('meets the restricted Pod Security Standard (a violation would show as a warning)', async () => {
    const loose = await renderChart(ns, { 'securityContext.allowPrivilegeEscalation': true });
    const input = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: loose });
    const result = await kubectl(['apply', '--dry-run=server', '-f', '-'], { input });
    expect(result.stderr).toContain('would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false');
  });

  it('puts namespaced objects in the release namespace, sidecar RBAC in the app namespace', () => {
    const sidecarBinding = findObject(objects, 'RoleBinding', 'gw-sidecar');
    expect(sidecarBinding.metadata.namespace).toBe(appNs);
    expect(findObject(objects, 'ServiceAccount', 'gw-sidecar').metadata.namespace).toBe(appNs);
    expect(findObject(objects, 'Secret', 'gw-sidecar-env').metadata.namespace).toBe(appNs);
    for (const o of objects.filter((x) => !x.kind.startsWith('Cluster') && !x.metadata.name.startsWith('gw-sidecar'))) {
      expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe(ns);
    }
  });

  it('labels every object the Helm way', () => {
    for (const o of objects) {
      const labels = o.metadata.labels ?? {};
      expect(labels, `${o.kind}/${o.metadata.name}`).toMatchObject({
        'app.kubernetes.io/name': 'gw',
        'app.kubernetes.io/instance': 'gw',
        'app.kubernetes.io/managed-by': 'Helm',
        'app.kubernetes.io/version': '0.1.0',
        'helm.sh/chart': 'gw-0.1.0',
      });
      expect(labels['app.kubernetes.io/component'], `${o.kind}/${o.metadata.name}`).toBeTruthy();
    }
  });

  it('gives every container resources, probes and a restrictive security context', () => {
    const specs = podSpecs(objects);
    expect(specs.map((s) => s.owner).sort()).toEqual(['Deployment/gw-admin', 'Deployment/gw-operator', 'StatefulSet/gw-redis']);
    for (const { owner, spec } of specs) {
      expect(spec.securityContext, owner).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
      expect(spec.securityContext.runAsUser, owner).toBeGreaterThan(0);
      const containers = [...(spec.initContainers ?? []), ...spec.containers];
      expect(containers.length).toBeGreaterThan(0);
      for (const c of containers) {
        const where = `${owner} container ${c.name}`;
        expect(c.securityContext, where).toEqual({
          runAsNonRoot: true,
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ['ALL'] },
          seccompProfile: { type: 'RuntimeDefault' },
        });
        expect(c.resources?.requests?.cpu, where).toBeTruthy();
        expect(c.resources?.requests?.memory, where).toBeTruthy();
        expect(c.resources?.limits?.memory, where).toBeTruthy();
        for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) expect(c[probe], `${where} ${probe}`).toBeTruthy();
        // A read-only root needs somewhere writable for temp files.
        expect(c.volumeMounts.map((m: { mountPath: string }) => m.mountPath), where).toContain('/tmp');
      }
    }
  });

  it('probes the health endpoints of operator and admin gateway on their health port', () => {
    for (const name of ['gw-operator', 'gw-admin']) {
      const c = findObject(objects, 'Deployment', name).spec.template.spec.containers[0];
      const health = c.ports.find((p: { name: string }) => p.name === 'health');
      expect(health.containerPort).toBe(8082);
      expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'health' });
      expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'health' });
    }
  });

  it('gives sidecar.warmUpRequests to the operator for injected sidecars, 0 included; null leaves the sidecar its default; the schema refuses a negative count', async () => {
    const operatorEnv = async (value: number): Promise<Record<string, string>> => {
      const env = containerEnv(findObject(await renderChart(ns, { 'sidecar.warmUpRequests': value }), 'Deployment', 'gw-operator'));
      return Object.fromEntries(env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    };
    expect((await operatorEnv(2000)).GW_SIDECAR_WARM_UP_REQUESTS).toBe('2000');
    const off = await operatorEnv(0);
    expect(off.GW_SIDECAR_WARM_UP_REQUESTS).toBe('0');
    // What the operator parses from it (the Redis URL comes from a Secret, so one stands in for it here).
    expect(parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', ...off })).toMatchObject({ sidecarWarmUpRequests: 0 });
    expect(containerEnv(findObject(objects, 'Deployment', 'gw-operator')).some((e) => e.name === 'GW_SIDECAR_WARM_UP_REQUESTS')).toBe(false);
    const bad = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'sidecar.warmUpRequests': -1 })], { allowFail: true });
    expect(bad.stderr).toContain('sidecar/warmUpRequests');
  });

  it('gives sidecar.sessionCacheSize to the operator for injected sidecars, in digits up to the most; null leaves the sidecar its default; the schema refuses 0', async () => {
    const env = containerEnv(findObject(await renderChart(ns, { 'sidecar.sessionCacheSize': 50_000 }), 'Deployment', 'gw-operator'));
    const given = Object.fromEntries(env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    expect(given.GW_SIDECAR_SESSION_CACHE_SIZE).toBe('50000');
    expect(parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', ...given })).toMatchObject({ sidecarSessionCacheSize: 50_000 });
    // Helm holds a values number as a float, which it writes as 1e+06 from a million up; the
    // operator takes decimal digits only.
    const most = containerEnv(findObject(await renderChart(ns, { 'sidecar.sessionCacheSize': 1_000_000, 'sidecar.warmUpRequests': 1_000_000 }), 'Deployment', 'gw-operator'));
    const mostGiven = Object.fromEntries(most.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    expect([mostGiven.GW_SIDECAR_SESSION_CACHE_SIZE, mostGiven.GW_SIDECAR_WARM_UP_REQUESTS]).toEqual(['1000000', '1000000']);
    expect(parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', ...mostGiven })).toMatchObject({ sidecarSessionCacheSize: 1_000_000, sidecarWarmUpRequests: 1_000_000 });
    expect(containerEnv(findObject(objects, 'Deployment', 'gw-operator')).some((e) => e.name === 'GW_SIDECAR_SESSION_CACHE_SIZE')).toBe(false);
    const bad = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'sidecar.sessionCacheSize': 0 })], { allowFail: true });
    expect(bad.stderr).toContain('sidecar/sessionCacheSize');
  });

  it('configures the operator through its documented environment', () => {
    const operator = findObject(objects, 'Deployment', 'gw-operator');
    const env = containerEnv(operator);
    expect(operator.spec.replicas).toBe(1);
    expect(operator.spec.template.spec.containers[0].image).toBe('gw-operator:0.1.0');
    expect(envValue(env, 'GW_SIDECAR_IMAGE').value).toBe('gw-sidecar:0.1.0');
    expect(envValue(env, 'GW_SIDECAR_IMAGE_PULL_POLICY').value).toBe('IfNotPresent');
    // What the operator parses: the chart's sidecar.resources, as the injector's default (the
    // Redis URL comes from a Secret, so one stands in for it here).
    const literal = Object.fromEntries(env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    const options = parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', ...literal });
    expect(options).toMatchObject({
      sidecarResources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } },
      sidecarNodeOptions: '--max-semi-space-size=8 --max-old-space-size=160',
    });
    expect(envValue(env, 'GW_LEADER_ELECTION').value).toBe('true');
    expect(envValue(env, 'GW_WATCH_NAMESPACES').value).toBe('');
    expect(envValue(env, 'GW_WEBHOOK_FAILURE_POLICY').value).toBe('Fail');
    expect(envValue(env, 'GW_WEBHOOK_LISTEN').value).toBe('0.0.0.0:9443');
    expect(envValue(env, 'GW_HEALTH_LISTEN').value).toBe('0.0.0.0:8082');
    expect(envValue(env, 'GW_OPERATOR_NAMESPACE').valueFrom?.fieldRef?.fieldPath).toBe('metadata.namespace');
    // The webhook Service the operator names in its webhook configuration exists and reaches the webhook port.
    const service = findObject(objects, 'Service', envValue(env, 'GW_WEBHOOK_SERVICE').value ?? '');
    expect(service.spec.ports).toEqual([{ name: 'https-webhook', port: 443, targetPort: 'webhook', protocol: 'TCP' }]);
    expect(service.spec.selector).toEqual(operator.spec.selector.matchLabels);
  });

  it('serves the admin listener only, with the admin and portal secrets from the auth Secret', () => {
    const admin = findObject(objects, 'Deployment', 'gw-admin');
    const env = containerEnv(admin);
    expect(admin.spec.template.spec.containers[0].image).toBe('gw-sidecar:0.1.0');
    // No proxy listener: the admin gateway takes no share of the DRL limits.
    expect(envValue(env, 'GW_LISTEN').value).toBe('off');
    expect(envValue(env, 'GW_ADMIN_LISTEN').value).toBe('0.0.0.0:8081');
    expect(envValue(env, 'GW_NAMESPACE').value).toBe(ns);
    expect(envValue(env, 'GW_ADMIN_SECRET').valueFrom?.secretKeyRef).toEqual({ name: 'gw-auth', key: 'admin-secret' });
    expect(envValue(env, 'GW_PORTAL_SECRET').valueFrom?.secretKeyRef).toEqual({ name: 'gw-auth', key: 'portal-secret' });
    const service = findObject(objects, 'Service', 'gw-admin');
    expect(service.spec.ports).toEqual([{ name: 'http-admin', port: 8081, targetPort: 'admin', protocol: 'TCP' }]);
    expect(service.spec.selector).toEqual(admin.spec.selector.matchLabels);
    const auth = findObject(objects, 'Secret', 'gw-auth');
    for (const key of ['admin-secret', 'portal-secret']) expect(Buffer.from(auth.data[key], 'base64').toString()).toMatch(/^[A-Za-z0-9]{40}$/);
  });

  it("sizes the chart Redis's maxmemory from its memory limit, and sets none for a limit not in Mi or Gi", async () => {
    const argsWith = async (memory: unknown): Promise<string[]> =>
      findObject(await renderChart(ns, { 'redis.resources.limits.memory': memory }), 'StatefulSet', 'gw-redis').spec.template.spec.containers[0].args as string[];
    expect(await argsWith('1Gi')).toEqual(expect.arrayContaining(['--maxmemory', '768mb']));
    expect(await argsWith('1000000000')).not.toContain('--maxmemory');
  });

  it('wires the chart Redis: password from its Secret, expanded into GW_REDIS_URL', () => {
    for (const name of ['gw-operator', 'gw-admin']) {
      const env = containerEnv(findObject(objects, 'Deployment', name));
      const passwordAt = env.findIndex((e) => e.name === 'REDIS_PASSWORD');
      const urlAt = env.findIndex((e) => e.name === 'GW_REDIS_URL');
      // Dependent variables expand only from variables declared earlier.
      expect(passwordAt).toBeGreaterThanOrEqual(0);
      expect(urlAt).toBeGreaterThan(passwordAt);
      expect(env[passwordAt]?.valueFrom?.secretKeyRef).toEqual({ name: 'gw-redis', key: 'password' });
      expect(env[urlAt]?.value).toBe(`redis://:$(REDIS_PASSWORD)@gw-redis.${ns}.svc:6379/0`);
    }
    const redis = findObject(objects, 'StatefulSet', 'gw-redis');
    expect(redis.spec.volumeClaimTemplates[0].spec.resources.requests.storage).toBe('1Gi');
    const args = redis.spec.template.spec.containers[0].args as string[];
    expect(args.slice(0, 2)).toEqual(['--requirepass', '$(REDIS_PASSWORD)']);
    // Full at three quarters of its 256Mi limit, it refuses writes rather than being killed.
    expect(args.slice(args.indexOf('--maxmemory'))).toEqual(['--maxmemory', '192mb', '--maxmemory-policy', 'noeviction']);
    const password = Buffer.from(findObject(objects, 'Secret', 'gw-redis').data.password, 'base64').toString();
    expect(password).toMatch(/^[A-Za-z0-9]{40}$/);
    // Injected sidecars get the same Redis, password included, from a Secret of their namespace.
    const sidecarEnv = findObject(objects, 'Secret', 'gw-sidecar-env');
    expect(Buffer.from(sidecarEnv.data.GW_REDIS_URL, 'base64').toString()).toBe(`redis://:${password}@gw-redis.${ns}.svc:6379/0`);
    expect(envValue(containerEnv(findObject(objects, 'Deployment', 'gw-operator')), 'GW_SIDECAR_ENV_SECRET').value).toBe('gw-sidecar-env');
    // The ServiceAccount the chart grants the sidecar's access: the webhook warns of a pod that runs as another.
    expect(envValue(containerEnv(findObject(objects, 'Deployment', 'gw-operator')), 'GW_SIDECAR_SERVICE_ACCOUNT').value).toBe('gw-sidecar');
  });

  // Each heap setting reaches its Deployment: the operator's own NODE_OPTIONS, the injected
  // sidecars' (the operator's option table takes it, as the test above shows, and injects it),
  // and the admin gateway's. Node refuses to start on a flag NODE_OPTIONS does not allow: these start it,
  // with that heap; the schema refuses other flags.
  it.each([
    { value: 'operator.nodeOptions', deployment: 'gw-operator', env: 'NODE_OPTIONS', shipped: '--max-semi-space-size=2 --max-old-space-size=256', heapMiB: [256, 300] },
    { value: 'sidecar.nodeOptions', deployment: 'gw-operator', env: 'GW_SIDECAR_NODE_OPTIONS', shipped: '--max-semi-space-size=8 --max-old-space-size=160', heapMiB: [160, 200] },
    { value: 'admin.nodeOptions', deployment: 'gw-admin', env: 'NODE_OPTIONS', shipped: '--max-semi-space-size=8 --max-old-space-size=160', heapMiB: [160, 200] },
  ])("sizes a V8 heap from $value, node's own flags only", async ({ value, deployment, env, shipped, heapMiB }) => {
    expect(envValue(containerEnv(findObject(objects, 'Deployment', deployment)), env).value).toBe(shipped);
    const node = await runTool(process.execPath, ['-e', 'process.stdout.write(String(require("v8").getHeapStatistics().heap_size_limit >> 20))'], {
      timeoutMs: 10_000,
      env: { ...process.env, NODE_OPTIONS: shipped },
    });
    expect(Number(node.stdout)).toBeGreaterThanOrEqual(heapMiB[0]!);
    expect(Number(node.stdout)).toBeLessThan(heapMiB[1]!);
    const none = await renderChart(ns, { [value]: '' });
    expect(containerEnv(findObject(none, 'Deployment', deployment)).some((e) => e.name === env)).toBe(false);
    const bad = await helm(['template', 'gw', CHART_DIR, ...setArgs({ [value]: '--require /tmp/x.js' })], { allowFail: true });
    expect(bad.stderr).toContain(value.replace('.', '/'));
  });

  it('renders the settings file with every gateway setting, valid for the gateway', () => {
    const settings = findObject(objects, 'ConfigMap', 'gw-settings');
    const file = parseYaml(settings.data['settings.yaml']) as Record<string, unknown>;
    expect(gatewaySettingsSchema.parse(file)).toEqual(defaultGatewaySettings);
    expect(Object.keys(file).sort()).toEqual(Object.keys(gatewaySettingsSchema.shape).sort());
    for (const name of ['gw-operator', 'gw-admin']) {
      const deployment = findObject(objects, 'Deployment', name);
      expect(envValue(containerEnv(deployment), 'GW_SETTINGS').value).toBe('/etc/gw/settings.yaml');
      const volume = deployment.spec.template.spec.volumes.find((v: { name: string }) => v.name === 'settings');
      expect(volume.configMap.name).toBe('gw-settings');
      expect(deployment.spec.template.metadata.annotations['checksum/settings']).toMatch(/^[0-9a-f]{64}$/);
    }
  });
});

describe('values', () => {
  const values = parseYaml(readFileSync(join(CHART_DIR, 'values.yaml'), 'utf8')) as { gateway: { settings: Record<string, unknown> } };
  const schema = JSON.parse(readFileSync(join(CHART_DIR, 'values.schema.json'), 'utf8'));

  it('has every gateway setting as a value, defaulting to the gateway default', () => {
    expect(values.gateway.settings).toEqual(defaultGatewaySettings);
  });

  it('types every gateway setting in values.schema.json as the gateway schema does', () => {
    const chartSettings = schema.properties.gateway.properties.settings;
    expect(chartSettings.additionalProperties).toBe(false);
    const gateway = z.toJSONSchema(gatewaySettingsSchema, { io: 'input' }) as { properties: Record<string, Record<string, unknown>> };
    expect(Object.keys(chartSettings.properties).sort()).toEqual(Object.keys(gateway.properties).sort());
    for (const [option, want] of Object.entries(gateway.properties)) {
      const got = chartSettings.properties[option];
      expect(got.type, option).toBe(want.type);
      expect(got.enum, option).toEqual(want.enum);
      expect(got.minimum, option).toEqual(want.minimum);
      // zod's int() bound (MAX_SAFE_INTEGER) is not worth repeating.
      expect(got.maximum, option).toEqual(want.maximum === Number.MAX_SAFE_INTEGER ? undefined : want.maximum);
    }
  });

  it('closes every object of values.schema.json to unknown keys', () => {
    const open: string[] = [];
    const walk = (node: unknown, path: string): void => {
      if (!node || typeof node !== 'object') return;
      const n = node as Record<string, unknown>;
      if (n.type === 'object' && n.properties && n.additionalProperties !== false) open.push(path);
      for (const [k, v] of Object.entries(n)) walk(v, `${path}/${k}`);
    };
    walk(schema, '#');
    expect(open).toEqual([]);
  });

  const rejected: Array<[string, Record<string, unknown>, string]> = [
    ['an unknown top-level key', { replicaCount: 3 }, "additional properties 'replicaCount' not allowed"],
    ['an unknown gateway setting', { 'gateway.settings.enable_magic': true }, "at '/gateway/settings': additional properties 'enable_magic' not allowed"],
    ['a setting of the wrong type', { 'gateway.settings.drl_threshold': 'five' }, "at '/gateway/settings/drl_threshold': got string, want integer"],
    ['a negative threshold', { 'gateway.settings.drl_threshold': -1 }, "at '/gateway/settings/drl_threshold'"],
    ['an unknown header mode', { 'gateway.settings.rate_limit_response_headers': 'both' }, "at '/gateway/settings/rate_limit_response_headers'"],
    ['an unknown Redis mode', { 'redis.external.mode': 'ring' }, "at '/redis/external/mode'"],
    ['a Redis URL of another scheme', { 'redis.enabled': false, 'redis.external.url': 'http://redis:6379' }, "at '/redis/external/url'"],
    ['a namespace that is not a DNS label', { watchNamespaces: ['Team_A'] }, "at '/watchNamespaces/0'"],
    ['an unknown failure policy', { 'operator.webhook.failurePolicy': 'Retry' }, "at '/operator/webhook/failurePolicy'"],
    ['zero operator replicas', { 'operator.replicas': 0 }, "at '/operator/replicas'"],
    ['a numeric admin secret', { 'auth.adminSecret': 12345 }, "at '/auth/adminSecret': got number, want string"],
    ['an admin secret under 16 characters', { 'auth.adminSecret': 'short-secret' }, "at '/auth/adminSecret': 'short-secret' does not match pattern"],
    ['a Redis password that would break the URL', { 'redis.auth.password': 'p@ss/word' }, "at '/redis/auth/password'"],
    ['a label key with a space', { commonLabels: { 'bad label': 'x' } }, "invalid propertyName 'bad label'"],
    ['a label value that is not a string', { 'operator.podLabels': { team: 1 } }, "at '/operator/podLabels"],
    ['a Redis image tag with a space', { 'redis.image.tag': 'bad:tag x' }, "at '/redis/image/tag'"],
    ['an image repository with a tag in it', { 'operator.image.repository': 'reg.io/gw-operator:1.2' }, "at '/operator/image/repository'"],
    ['a sidecar resource the operator does not size by', { 'sidecar.resources': { limits: { memmory: '512Mi' } } }, "additional properties 'memmory' not allowed"],
    ['a storage class that is no name', { 'redis.persistence.storageClass': 'a b' }, "at '/redis/persistence/storageClass'"],
    ['an error ratio above 1', { 'monitoring.prometheusRule.serverErrorRatio': '1.5' }, "at '/monitoring/prometheusRule/serverErrorRatio'"],
  ];
  it.each(rejected)('rejects %s, naming the value, and renders nothing', async (_what, bad, message) => {
    const result = await helm(['template', 'gw', CHART_DIR, ...setArgs(bad)], { allowFail: true });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("values don't meet the specifications of the schema");
    expect(result.stderr).toContain(message);
    expect(result.stdout).toBe('');
  });
});

describe('helm template with non-default values', () => {
  it('uses an external standalone Redis from a URL kept in a chart Secret', async () => {
    const url = 'rediss://:s3cret@redis.example.internal:6380/2';
    const objects = await renderChart(ns, { 'redis.enabled': false, 'redis.external.url': url, 'sidecar.namespaces': [appNs] });
    expect(objects.filter((o) => o.metadata.name.startsWith('gw-redis')).map((o) => o.kind)).toEqual(['Secret']);
    expect(Buffer.from(findObject(objects, 'Secret', 'gw-redis').data.url, 'base64').toString()).toBe(url);
    expect(Buffer.from(findObject(objects, 'Secret', 'gw-sidecar-env').data.GW_REDIS_URL, 'base64').toString()).toBe(url);
    for (const name of ['gw-operator', 'gw-admin']) {
      const env = containerEnv(findObject(objects, 'Deployment', name));
      expect(envValue(env, 'GW_REDIS_URL').valueFrom?.secretKeyRef).toEqual({ name: 'gw-redis', key: 'url' });
      expect(env.some((e) => e.name === 'REDIS_PASSWORD')).toBe(false);
    }
    await serverValidate(objects);
  });

  it('builds a sentinel URL from the sentinels, master name and password', async () => {
    const objects = await renderChart(ns, {
      'redis.enabled': false,
      'redis.external.mode': 'sentinel',
      'redis.external.nodes': ['sentinel-0.redis:26379', 'sentinel-1.redis:26379'],
      'redis.external.sentinelMasterName': 'gw-master',
      'redis.external.password': 'pw-1',
    });
    const url = Buffer.from(findObject(objects, 'Secret', 'gw-redis').data.url, 'base64').toString();
    expect(url).toBe('redis+sentinel://:pw-1@sentinel-0.redis:26379,sentinel-1.redis:26379/gw-master');
    expect(objects.some((o) => o.kind === 'StatefulSet')).toBe(false);
    await serverValidate(objects);
  });

  it('builds a cluster URL from the seed nodes', async () => {
    const objects = await renderChart(ns, { 'redis.enabled': false, 'redis.external.mode': 'cluster', 'redis.external.nodes': ['node-a:6379', 'node-b:6379', 'node-c:6379'] });
    const url = Buffer.from(findObject(objects, 'Secret', 'gw-redis').data.url, 'base64').toString();
    expect(url).toBe('redis+cluster://node-a:6379,node-b:6379,node-c:6379');
    await serverValidate(objects);
  });

  it('takes GW_REDIS_URL from an existing Secret and renders no Redis Secret', async () => {
    const objects = await renderChart(ns, { 'redis.enabled': false, 'redis.external.existingSecret': 'my-redis', 'redis.external.existingSecretKey': 'connection' });
    expect(objects.some((o) => o.metadata.name.startsWith('gw-redis'))).toBe(false);
    const env = containerEnv(findObject(objects, 'Deployment', 'gw-operator'));
    expect(envValue(env, 'GW_REDIS_URL').valueFrom?.secretKeyRef).toEqual({ name: 'my-redis', key: 'connection' });
  });

  it('refuses an external Redis without an address, with a message saying what is missing', async () => {
    const noUrl = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'redis.enabled': false })], { allowFail: true });
    expect(noUrl.code).not.toBe(0);
    expect(noUrl.stderr).toContain('redis.external.url is required');
    const noNodes = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'redis.enabled': false, 'redis.external.mode': 'cluster' })], {
      allowFail: true,
    });
    expect(noNodes.code).not.toBe(0);
    expect(noNodes.stderr).toContain('redis.external.nodes');
  });

  it('refuses values that contradict each other, where one would be dropped without a word, saying what to change', async () => {
    const refusals: Array<[Record<string, unknown>, string]> = [
      [{ 'redis.external.url': 'redis://ext:6379' }, 'redis.external.url is set with redis.enabled=true: the chart runs its own Redis and would not use it'],
      [{ 'redis.external.existingSecret': 'mine' }, 'redis.external.existingSecret is set with redis.enabled=true'],
      [{ 'redis.enabled': false, 'redis.external.url': 'redis://ext:6379', 'redis.auth.password': 'pw' }, 'redis.auth.password is set with redis.enabled=false'],
      [{ 'redis.enabled': false, 'redis.external.url': 'redis://ext:6379', 'redis.external.existingSecret': 'mine' }, 'redis.external.existingSecret holds the whole GW_REDIS_URL, so redis.external.url would not be used'],
      [{ 'redis.enabled': false, 'redis.external.url': 'redis://ext:6379', 'redis.external.password': 'pw' }, 'redis.external.password is for the sentinel and cluster modes'],
      [{ 'redis.auth.password': 'pw', 'redis.auth.existingSecret': 'mine' }, 'redis.auth.password and redis.auth.existingSecret are both set'],
      [{ 'auth.adminSecret': 'a'.repeat(32), 'auth.existingSecret': 'mine' }, 'auth.adminSecret and auth.existingSecret are both set'],
      [{ 'admin.enabled': false, 'auth.portalSecret': 'p'.repeat(32) }, 'auth.portalSecret is set with admin.enabled=false: only the admin gateway uses the admin and portal keys'],
      [{ 'admin.enabled': false, 'auth.existingSecret': 'mine' }, 'auth.existingSecret is set with admin.enabled=false'],
    ];
    for (const [values, message] of refusals) {
      const result = await helm(['template', 'gw', CHART_DIR, ...setArgs(values)], { allowFail: true });
      expect(result.code, JSON.stringify(values)).not.toBe(0);
      expect(result.stderr).toContain(message);
    }
    // Each of them alone, as the README's install forms give them, renders.
    for (const values of [{ 'redis.enabled': false, 'redis.external.existingSecret': 'mine' }, { 'redis.enabled': false, 'redis.external.mode': 'cluster', 'redis.external.nodes': ['a:1'], 'redis.external.password': 'pw' }]) {
      expect((await helm(['template', 'gw', CHART_DIR, ...setArgs(values)], { allowFail: true })).code, JSON.stringify(values)).toBe(0);
    }
  });

  it('refuses labels that would take a selector label, one port for two listeners, and replicas without a leader, saying which', async () => {
    const refusals: Array<[Record<string, unknown>, string]> = [
      [{ commonLabels: { 'app.kubernetes.io/name': 'myapp' } }, "commonLabels must not set app.kubernetes.io/name: the chart's selectors use it"],
      [{ 'admin.podLabels': { 'app.kubernetes.io/component': 'x' } }, "admin.podLabels must not set app.kubernetes.io/component: the chart's selectors use it"],
      [{ commonLabels: { 'app.kubernetes.io/managed-by': 'argocd' } }, 'commonLabels must not set app.kubernetes.io/managed-by: Helm sets it'],
      [{ 'admin.port': 8082 }, 'admin.port and admin.healthPort are both 8082'],
      [{ 'operator.webhook.port': 8082 }, 'operator.webhook.port and operator.healthPort are both 8082'],
      [{ 'operator.leaderElection': false, 'operator.replicas': 2 }, 'operator.leaderElection is false with operator.replicas 2: every replica would reconcile the same resources'],
    ];
    for (const [values, message] of refusals) {
      const result = await helm(['template', 'gw', CHART_DIR, ...setArgs(values)], { allowFail: true });
      expect(result.code, JSON.stringify(values)).not.toBe(0);
      expect(result.stderr).toContain(message);
    }
  });

  it('refuses sidecar resources no injected sidecar could run with, for the reason the operator and its webhook give', async () => {
    const refusals: Array<[Record<string, unknown>, string]> = [
      [{ 'sidecar.resources.limits.memory': '32Mi' }, `sidecar.resources.limits.memory: ${memoryLimitProblem('32Mi')}`],
      [{ 'sidecar.resources.limits.memory': '0.05Gi' }, 'the gw-sidecar memory limit 0.05Gi is under 64Mi'],
      [{ 'sidecar.resources.requests.memory': '512Mi' }, 'sidecar.resources: the gw-sidecar memory request 512Mi is above its limit 256Mi'],
      [{ 'sidecar.resources.limits.cpu': '20m' }, 'sidecar.resources: the gw-sidecar cpu request 50m is above its limit 20m'],
      [{ 'sidecar.resources.limits.memory': '2Ti' }, 'sidecar.resources: the gw-sidecar memory limit 2Ti is above 1Ti, more than a gateway sidecar can use: check the suffix'],
      [{ 'sidecar.resources.requests.cpu': 2000 }, 'sidecar.resources: the gw-sidecar cpu request 2000 is above 1000'],
      // The shipped old space is sized for the shipped 256Mi: a lower limit needs a lower one.
      [{ 'sidecar.resources.limits.memory': '96Mi' }, 'sidecar.nodeOptions: --max-old-space-size=160 is more than 5/8 of sidecar.resources.limits.memory 96Mi, as the chart sizes it (160 of 256Mi): V8 would let garbage grow past the limit and the kernel would kill every injected sidecar; give sidecar.nodeOptions --max-old-space-size=60 or less with this limit'],
      [{ 'sidecar.resources.limits.memory': '200Mi', 'sidecar.nodeOptions': '--max-old-space-size=126' }, '--max-old-space-size=126 is more than 5/8 of sidecar.resources.limits.memory 200Mi'],
    ];
    for (const [values, message] of refusals) {
      const result = await helm(['template', 'gw', CHART_DIR, ...setArgs(values)], { allowFail: true });
      expect(result.code, JSON.stringify(values)).not.toBe(0);
      expect(result.stderr).toContain(message);
    }
    // The least the sidecar runs with, and a limit given as a number of bytes, render with an old space in proportion; the operator takes them.
    for (const [memory, oldSpace] of [['64Mi', 40], [1073741824, 160], ['96Mi', 60]] as const) {
      const values = { 'sidecar.resources.limits.memory': memory, 'sidecar.resources.requests.memory': '64Mi', 'sidecar.nodeOptions': `--max-semi-space-size=2 --max-old-space-size=${oldSpace}` };
      const env = containerEnv(findObject(await renderChart(ns, values), 'Deployment', 'gw-operator'));
      const literal = Object.fromEntries(env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
      expect(parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', ...literal }))
        .toMatchObject({ sidecarResources: { limits: { memory: String(memory) } } });
    }
  });

  it('refuses sidecar namespaces the injection webhook never injects in: the release namespace and kube-system', async () => {
    const env = containerEnv(findObject(await renderChart(ns), 'Deployment', 'gw-operator'));
    const literal = Object.fromEntries(env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
    const options = parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', GW_OPERATOR_NAMESPACE: ns, ...literal }) as OperatorOptions;
    const excluded = webhookTarget(options).excludedNamespaces;
    expect(excluded.sort()).toEqual(['kube-system', ns].sort());
    for (const namespace of excluded) {
      const result = await helm(['template', 'gw', CHART_DIR, '--namespace', ns, ...setArgs({ 'sidecar.namespaces': [appNs, namespace] })], { allowFail: true });
      expect(result.code, namespace).not.toBe(0);
      expect(result.stderr).toContain(`sidecar.namespaces must not hold ${namespace}: the injection webhook never injects in the release's namespace nor in kube-system`);
    }
  });

  it('refuses sidecar namespaces and an admin namespace the watched namespaces do not hold, naming them', async () => {
    const refusals: Array<[Record<string, unknown>, string]> = [
      [{ watchNamespaces: ['demo'], 'admin.targetNamespace': 'demo', 'sidecar.namespaces': ['demo', 'demo2'] }, 'sidecar.namespaces holds demo2, which watchNamespaces (demo) does not: the operator would never compile its APIs, nor the webhook inject its pods'],
      [{ watchNamespaces: ['demo'], 'admin.targetNamespace': 'elsewhere' }, 'admin.targetNamespace is elsewhere, which watchNamespaces (demo) does not hold: the operator would never reconcile the Keys the admin operations create there'],
      [{ watchNamespaces: ['demo', 'demo2'] }, `admin.targetNamespace (empty: the release namespace) is ${ns}, which watchNamespaces (demo, demo2) does not hold`],
    ];
    for (const [values, message] of refusals) {
      const result = await helm(['template', 'gw', CHART_DIR, '--namespace', ns, ...setArgs(values)], { allowFail: true });
      expect(result.code, JSON.stringify(values)).not.toBe(0);
      expect(result.stderr).toContain(message);
    }
    // Inside the watched namespaces, or without the admin gateway, or watching all: rendered.
    await renderChart(ns, { watchNamespaces: ['demo', 'demo2'], 'admin.targetNamespace': 'demo', 'sidecar.namespaces': ['demo2'] });
    await renderChart(ns, { watchNamespaces: ['demo'], 'admin.enabled': false });
    await renderChart(ns, { 'admin.targetNamespace': 'elsewhere', 'sidecar.namespaces': ['demo2'] });
  });

  it('refuses a release name or fullnameOverride that would name Services with a digit first, which the API server refuses', async () => {
    const byRelease = await helm(['template', '1gw', CHART_DIR], { allowFail: true });
    expect(byRelease.code).not.toBe(0);
    expect(byRelease.stderr).toContain('the resource name prefix "1gw" must start with a letter');
    const byOverride = await helm(['template', 'gw', CHART_DIR, ...setArgs({ fullnameOverride: '1gw' })], { allowFail: true });
    expect(byOverride.code).not.toBe(0);
    expect(byOverride.stderr).toContain("'1gw' does not match pattern");
    // A release name with a digit first is fine when the override names the resources.
    const objects = await renderChart(ns, { fullnameOverride: 'edge-gw' }, '1gw');
    expect(findObject(objects, 'Service', 'edge-gw-admin').metadata.name).toBe('edge-gw-admin');
  });

  it('adds common and pod labels once each, the selectors still matching; "-" asks for no storage class; an error ratio given by --set', async () => {
    const objects = await renderChart(ns, {
      commonLabels: { 'app.kubernetes.io/part-of': 'platform', 'example.com/team': 'edge' },
      'operator.podLabels': { 'app.kubernetes.io/part-of': 'operator-pods', tier: 'control' },
      'redis.persistence.storageClass': '-',
    });
    const operator = findObject(objects, 'Deployment', 'gw-operator');
    // parseManifest refuses a document with a key twice, so each label is there once.
    expect(operator.metadata.labels).toMatchObject({ 'app.kubernetes.io/part-of': 'platform', 'example.com/team': 'edge', 'app.kubernetes.io/component': 'operator' });
    expect(operator.spec.template.metadata.labels).toMatchObject({ 'app.kubernetes.io/part-of': 'operator-pods', tier: 'control', 'example.com/team': 'edge' });
    for (const workload of objects.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet')) {
      expect(workload.spec.template.metadata.labels, workload.metadata.name).toMatchObject(workload.spec.selector.matchLabels);
    }
    expect(findObject(objects, 'StatefulSet', 'gw-redis').spec.volumeClaimTemplates[0].spec.storageClassName).toBe('');
    await serverValidate(objects);

    const set = await helm(['template', 'gw', CHART_DIR, '--set', 'monitoring.prometheusRule.enabled=true', '--set', 'monitoring.prometheusRule.serverErrorRatio=0.1']);
    const rule = parseManifest(set.stdout).find((o) => o.kind === 'PrometheusRule');
    expect(JSON.stringify(rule?.spec)).toContain('> 0.1');
  });

  it('rolls the pods that read a password or admin key given anew, and not for a render with the same values', async () => {
    const checksums = (objects: K8sObject[]): string[] =>
      [findObject(objects, 'Deployment', 'gw-operator'), findObject(objects, 'Deployment', 'gw-admin'), findObject(objects, 'StatefulSet', 'gw-redis')].map(
        (w) => w.spec.template.metadata.annotations['checksum/credentials'],
      );
    const before = checksums(await renderChart(ns, { 'redis.auth.password': 'first-password' }));
    expect(checksums(await renderChart(ns, { 'redis.auth.password': 'first-password' }))).toEqual(before);
    const after = checksums(await renderChart(ns, { 'redis.auth.password': 'second-password' }));
    after.forEach((checksum, i) => expect(checksum).not.toBe(before[i]));
    const adminKey = checksums(await renderChart(ns, { 'redis.auth.password': 'first-password', 'auth.adminSecret': 'new-admin-key-given-now' }));
    expect(adminKey[1]).not.toBe(before[1]);
    // Generated secrets differ between two renders without a cluster; they must not roll anything.
    expect(checksums(await renderChart(ns))).toEqual(checksums(await renderChart(ns)));
    // Whoever reads pods reads the annotation: it is salted by the release (and slow to derive),
    // so the same password does not give the same annotation in another release to guess against.
    const otherRelease = await helm(['template', 'edge', CHART_DIR, '--namespace', ns, ...setArgs({ 'redis.auth.password': 'first-password', fullnameOverride: 'gw' })]);
    expect(checksums(parseManifest(otherRelease.stdout))[0]).not.toBe(before[0]);
  });

  it('renders changed settings into the settings file and rolls the pods', async () => {
    const defaults = await renderChart(ns);
    const changed = await renderChart(ns, {
      'gateway.settings.enable_redis_rolling_limiter': true,
      'gateway.settings.drl_threshold': 5,
      'gateway.settings.rate_limit_response_headers': 'rate_limits',
      'gateway.settings.forwarder': 'http-proxy',
    });
    const file = gatewaySettingsSchema.parse(parseYaml(findObject(changed, 'ConfigMap', 'gw-settings').data['settings.yaml']));
    expect(file).toEqual({ ...defaultGatewaySettings, enable_redis_rolling_limiter: true, drl_threshold: 5, rate_limit_response_headers: 'rate_limits', forwarder: 'http-proxy' });
    const checksum = (objects: K8sObject[]): string => findObject(objects, 'Deployment', 'gw-operator').spec.template.metadata.annotations['checksum/settings'];
    expect(checksum(changed)).not.toBe(checksum(defaults));
  });

  it('scopes operator reads to the watched namespaces, and admin reads to the one namespace it works in', async () => {
    const other = await createNamespace('chart-watch');
    const objects = await renderChart(ns, { watchNamespaces: [appNs, other], 'admin.targetNamespace': appNs });
    expect(envValue(containerEnv(findObject(objects, 'Deployment', 'gw-operator')), 'GW_WATCH_NAMESPACES').value).toBe(`${appNs},${other}`);
    expect(objects.filter((o) => o.kind === 'ClusterRoleBinding').map((o) => o.metadata.name).sort()).toEqual(['gw-admin-review', 'gw-operator-webhook']);
    const watchBindings = objects.filter((o) => o.kind === 'RoleBinding' && o.metadata.name === 'gw-operator-watch');
    expect(watchBindings.map((o) => o.metadata.namespace).sort()).toEqual([appNs, other].sort());
    // The admin gateway's resource store reads only the namespace it writes Keys to.
    const adminReads = objects.filter((o) => o.kind === 'RoleBinding' && o.metadata.name === 'gw-admin-read');
    expect(adminReads.map((o) => o.metadata.namespace)).toEqual([appNs]);
    await serverValidate(objects);
  });

  it('names the operator\'s webhook configuration, Lease and Secret after the release, as its RBAC does, and keeps the webhook to the watched namespaces', async () => {
    const render = async (release: string, values: Record<string, unknown>) => {
      const objects = await renderChart(ns, values, release);
      const prefix = release === 'gw' ? 'gw' : String(values.fullnameOverride);
      const env = containerEnv(findObject(objects, 'Deployment', `${prefix}-operator`));
      const literal = Object.fromEntries(env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
      // The Redis URL comes from a Secret and the namespace from the pod: stand-ins here.
      const options = parseOptions([], { GW_REDIS_URL: 'redis://gw-redis:6379', GW_OPERATOR_NAMESPACE: ns, ...literal }) as OperatorOptions;
      const rules = (kind: string, name: string): Array<{ resources: string[]; resourceNames?: string[]; verbs: string[] }> => findObject(objects, kind, name).rules;
      const named = (kind: string, name: string, resource: string, verb: string): string[] =>
        rules(kind, name).filter((r) => r.resources.includes(resource) && r.verbs.includes(verb)).flatMap((r) => r.resourceNames ?? []);
      return {
        names: releaseNames(options.releaseName),
        rbac: {
          webhookConfiguration: named('ClusterRole', `${prefix}-operator-webhook`, 'mutatingwebhookconfigurations', 'update'),
          lease: named('Role', `${prefix}-operator`, 'leases', 'update'),
          webhookSecret: named('Role', `${prefix}-operator`, 'secrets', 'update'),
          legacyDelete: named('ClusterRole', `${prefix}-operator-webhook`, 'mutatingwebhookconfigurations', 'delete'),
        },
        selector: webhookConfiguration(webhookTarget(options), '').webhooks?.[0]?.namespaceSelector?.matchExpressions,
      };
    };
    // The default release keeps the names it always had.
    const gw = await render('gw', {});
    expect(gw.names).toEqual({ webhookConfiguration: 'gw-sidecar-injector', lease: 'gw-operator-leader', webhookSecret: 'gw-webhook-tls' });
    expect(gw.rbac).toEqual({ webhookConfiguration: ['gw-sidecar-injector'], lease: ['gw-operator-leader'], webhookSecret: ['gw-webhook-tls'], legacyDelete: [] });
    expect(gw.selector).toEqual([
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['kube-system', ns] },
      { key: 'gw.dev/inject', operator: 'NotIn', values: ['false', 'disabled'] },
    ]);
    const acme = await render('acme', { fullnameOverride: 'acme', watchNamespaces: [appNs], 'admin.targetNamespace': appNs });
    expect(acme.names).toEqual({ webhookConfiguration: 'acme-sidecar-injector', lease: 'acme-operator-leader', webhookSecret: 'acme-webhook-tls' });
    // It may delete the configuration of the one fixed name only (the operator checks it owns it).
    expect(acme.rbac).toEqual({ webhookConfiguration: ['acme-sidecar-injector'], lease: ['acme-operator-leader'], webhookSecret: ['acme-webhook-tls'], legacyDelete: ['gw-sidecar-injector'] });
    expect(acme.selector).toContainEqual({ key: 'kubernetes.io/metadata.name', operator: 'In', values: [appNs] });
  });

  it('runs two operator replicas on different nodes where it can, with a disruption budget, and can leave the admin gateway out, with its keys', async () => {
    const objects = await renderChart(ns, { 'operator.replicas': 2, 'admin.enabled': false, 'redis.persistence.enabled': false });
    const operator = findObject(objects, 'Deployment', 'gw-operator');
    expect(operator.spec.replicas).toBe(2);
    expect(operator.spec.template.spec.affinity).toEqual({
      podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 100, podAffinityTerm: { topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: operator.spec.selector.matchLabels } } }] },
    });
    expect(findObject(objects, 'PodDisruptionBudget', 'gw-operator').spec.maxUnavailable).toBe(1);
    expect(objects.some((o) => o.metadata.name.startsWith('gw-admin'))).toBe(false);
    expect(objects.filter((o) => o.kind === 'Secret').map((o) => o.metadata.name)).toEqual(['gw-redis']);
    const redis = findObject(objects, 'StatefulSet', 'gw-redis');
    expect(redis.spec.volumeClaimTemplates).toBeUndefined();
    expect(redis.spec.template.spec.volumes.find((v: { name: string }) => v.name === 'data').emptyDir).toEqual({});
    await serverValidate(objects);

    // An affinity given replaces the spread.
    const nodeAffinity = { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'pool', operator: 'In', values: ['control'] }] }] } };
    const given = await renderChart(ns, { 'admin.affinity': { nodeAffinity } });
    expect(findObject(given, 'Deployment', 'gw-admin').spec.template.spec.affinity).toEqual({ nodeAffinity });
    expect(findObject(given, 'Deployment', 'gw-operator').spec.template.spec.affinity.podAntiAffinity).toBeDefined();
  });

  it('pins each image by its digest when given, the tag then unused, and refuses a digest that is not sha256', async () => {
    const digest = (c: string): string => `sha256:${c.repeat(64)}`;
    const objects = await renderChart(ns, { 'image.tag': '9.9.9', 'operator.image.digest': digest('a'), 'sidecar.image.digest': digest('b'), 'redis.image.digest': digest('c') });
    const images = podSpecs(objects).flatMap(({ spec }) => spec.containers.map((c: { image: string }) => c.image));
    expect(new Set(images)).toEqual(new Set([`gw-operator@${digest('a')}`, `gw-sidecar@${digest('b')}`, `gw-redis@${digest('c')}`]));
    const operator = findObject(objects, 'Deployment', 'gw-operator');
    expect(envValue(containerEnv(operator), 'GW_SIDECAR_IMAGE').value).toBe(`gw-sidecar@${digest('b')}`);
    await serverValidate(objects);
    // Only the sidecar pinned: the others keep the tag.
    const one = await renderChart(ns, { 'image.tag': '9.9.9', 'sidecar.image.digest': digest('b') });
    expect(findObject(one, 'Deployment', 'gw-operator').spec.template.spec.containers[0].image).toBe('gw-operator:9.9.9');
    const refused = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'sidecar.image.digest': 'latest' })], { allowFail: true });
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("at '/sidecar/image/digest'");
  });

  it('serves the admin listener over HTTPS from a TLS Secret when told, leaving health plain for the probes', async () => {
    const objects = await renderChart(ns, { 'admin.tls.secretName': 'gw-admin-tls' });
    const admin = findObject(objects, 'Deployment', 'gw-admin');
    const env = containerEnv(admin);
    expect(envValue(env, 'GW_TLS_CERT_FILE').value).toBe('/etc/gw-tls/tls.crt');
    expect(envValue(env, 'GW_TLS_KEY_FILE').value).toBe('/etc/gw-tls/tls.key');
    expect(envValue(env, 'GW_TLS_LISTENERS').value).toBe('admin');
    const pod = admin.spec.template.spec;
    expect(pod.volumes).toContainEqual({ name: 'tls', secret: { secretName: 'gw-admin-tls' } });
    expect(pod.containers[0].volumeMounts).toContainEqual({ name: 'tls', mountPath: '/etc/gw-tls', readOnly: true });
    expect(pod.containers[0].readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'health' });
    expect(findObject(objects, 'Service', 'gw-admin').spec.ports).toEqual([{ name: 'https-admin', port: 8081, targetPort: 'admin', protocol: 'TCP' }]);
    await serverValidate(objects);
    // Without the value, nothing of it: no env, no volume.
    const plain = findObject(await renderChart(ns, {}), 'Deployment', 'gw-admin');
    expect(containerEnv(plain).some((e) => e.name.startsWith('GW_TLS_'))).toBe(false);
    expect(plain.spec.template.spec.volumes.some((v: { name: string }) => v.name === 'tls')).toBe(false);
  });

  it('ships NetworkPolicies when told: labelled clients to the admin port, gw pods to Redis', async () => {
    expect((await renderChart(ns, {})).some((o) => o.kind === 'NetworkPolicy')).toBe(false);
    const objects = await renderChart(ns, { 'networkPolicy.enabled': true });
    const ports = (workload: K8sObject): string[] => workload.spec.template.spec.containers[0].ports.map((p: { name: string }) => p.name);

    const admin = findObject(objects, 'Deployment', 'gw-admin');
    const adminPolicy = findObject(objects, 'NetworkPolicy', 'gw-admin');
    expect(adminPolicy.spec.podSelector.matchLabels).toEqual(admin.spec.selector.matchLabels);
    expect(adminPolicy.spec.policyTypes).toEqual(['Ingress']);
    expect(adminPolicy.spec.ingress).toEqual([
      { from: [{ podSelector: { matchLabels: { 'gw.dev/admin-client': 'true' } }, namespaceSelector: {} }], ports: [{ port: 'admin', protocol: 'TCP' }] },
      { ports: [{ port: 'health', protocol: 'TCP' }] },
    ]);
    expect(ports(admin)).toEqual(expect.arrayContaining(['admin', 'health']));

    const redis = findObject(objects, 'StatefulSet', 'gw-redis');
    const redisPolicy = findObject(objects, 'NetworkPolicy', 'gw-redis');
    expect(redisPolicy.spec.podSelector.matchLabels).toEqual(redis.spec.selector.matchLabels);
    expect(redisPolicy.spec.ingress).toEqual([
      {
        from: [
          { podSelector: { matchLabels: findObject(objects, 'Deployment', 'gw-operator').spec.selector.matchLabels } },
          { podSelector: { matchLabels: admin.spec.selector.matchLabels } },
          // The label the webhook puts on every pod it injects a gateway into, in any namespace.
          { podSelector: { matchLabels: { [GATEWAY_POD_LABEL]: 'true' } }, namespaceSelector: {} },
        ],
        ports: [{ port: 'redis', protocol: 'TCP' }],
      },
    ]);
    expect(ports(redis)).toContain('redis');
    await serverValidate(objects);

    const scoped = await renderChart(ns, { 'networkPolicy.enabled': true, 'networkPolicy.adminClients.namespaceLabels': { team: 'ops' }, 'redis.enabled': false, 'redis.external.url': 'redis://r:6379' });
    expect(findObject(scoped, 'NetworkPolicy', 'gw-admin').spec.ingress[0].from[0].namespaceSelector).toEqual({ matchLabels: { team: 'ops' } });
    expect(scoped.filter((o) => o.kind === 'NetworkPolicy').map((o) => o.metadata.name)).toEqual(['gw-admin']);
    // No labels at all would let every pod in: the schema refuses it (null removes the default label).
    const empty = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'networkPolicy.enabled': true, 'networkPolicy.adminClients.podLabels.gw\\.dev/admin-client': null })], { allowFail: true });
    expect(empty.code).not.toBe(0);
    expect(empty.stderr).toContain("at '/networkPolicy/adminClients/podLabels': minProperties: got 0, want 1");

    // An admin Service outside clients reach: their CIDRs reach the admin port too; without any, refused.
    const outside = await renderChart(ns, { 'networkPolicy.enabled': true, 'admin.service.type': 'LoadBalancer', 'networkPolicy.adminClients.ipBlocks': ['203.0.113.0/24', '2001:db8::/32'] });
    const outsidePolicy = findObject(outside, 'NetworkPolicy', 'gw-admin');
    expect(outsidePolicy.spec.ingress[1]).toEqual({ from: [{ ipBlock: { cidr: '203.0.113.0/24' } }, { ipBlock: { cidr: '2001:db8::/32' } }], ports: [{ port: 'admin', protocol: 'TCP' }] });
    await serverValidate(outside);
    for (const type of ['LoadBalancer', 'NodePort']) {
      const blocked = await helm(['template', 'gw', CHART_DIR, ...setArgs({ 'networkPolicy.enabled': true, 'admin.service.type': type })], { allowFail: true });
      expect(blocked.code, type).not.toBe(0);
      expect(blocked.stderr).toContain(`admin.service.type is ${type} with networkPolicy.enabled: the admin NetworkPolicy admits labelled pods only`);
    }
  });

  it('uses given secrets and an existing auth Secret as told', async () => {
    const given = await renderChart(ns, { 'auth.adminSecret': 'admin-key-given-here', 'auth.portalSecret': 'portal-key-given-here', 'redis.auth.password': 'redis-given' });
    const auth = findObject(given, 'Secret', 'gw-auth');
    expect(Buffer.from(auth.data['admin-secret'], 'base64').toString()).toBe('admin-key-given-here');
    expect(Buffer.from(auth.data['portal-secret'], 'base64').toString()).toBe('portal-key-given-here');
    expect(Buffer.from(findObject(given, 'Secret', 'gw-redis').data.password, 'base64').toString()).toBe('redis-given');
    const existing = await renderChart(ns, { 'auth.existingSecret': 'team-gw-auth' });
    expect(existing.some((o) => o.kind === 'Secret' && o.metadata.name === 'gw-auth')).toBe(false);
    const env = containerEnv(findObject(existing, 'Deployment', 'gw-admin'));
    expect(envValue(env, 'GW_ADMIN_SECRET').valueFrom?.secretKeyRef).toEqual({ name: 'team-gw-auth', key: 'admin-secret' });
  });
});

describe('CRDs', () => {
  const generated = resolve(CHART_DIR, '../../crds/generated');
  it('ships the generated CRDs unchanged, one per kind, and renders them with --include-crds', async () => {
    const files = readdirSync(join(CHART_DIR, 'crds')).sort();
    expect(files).toEqual(['apidefinitions.gw.dev.yaml', 'categories.gw.dev.yaml', 'keys.gw.dev.yaml', 'policies.gw.dev.yaml', 'portalproducts.gw.dev.yaml']);
    for (const file of files) {
      expect(existsSync(join(generated, file)), file).toBe(true);
      expect(readFileSync(join(CHART_DIR, 'crds', file), 'utf8'), file).toBe(readFileSync(join(generated, file), 'utf8'));
    }
    const { stdout } = await helm(['template', 'gw', CHART_DIR, '--include-crds']);
    const crds = stdout.match(/^kind: CustomResourceDefinition$/gm) ?? [];
    expect(crds).toHaveLength(5);
  });
});
