import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { CoreV1Api, CustomObjectsApi, PatchStrategy, Watch, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { Redis } from 'ioredis';
import { createNamespace, kubeConfig, kubectl, testEnv } from '../harness/index.ts';

const run = promisify(execFile);

// A CRD of the smoke test's own, so the product CRDs stay out of the test bed's check.
const GROUP = 'smoke.gw.dev';
const PLURAL = 'widgets';
const WIDGET_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: `${PLURAL}.${GROUP}` },
  spec: {
    group: GROUP,
    scope: 'Namespaced',
    names: { plural: PLURAL, singular: 'widget', kind: 'Widget' },
    versions: [
      {
        name: 'v1',
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: { type: 'object', properties: { size: { type: 'integer' } } },
              status: { type: 'object', properties: { phase: { type: 'string' } } },
            },
          },
        },
      },
    ],
  },
};

/**
 * Opens a watch, retrying while the API server answers 429: a freshly Established CRD's
 * watch cache needs a moment before it serves watches.
 */
async function openWatch(kc: KubeConfig, path: string, onEvent: (phase: string, obj: unknown) => void): Promise<AbortController> {
  for (let attempt = 1; ; attempt++) {
    let failure: unknown;
    // Watch reports a refused request through `done`, before watch() resolves.
    const controller = await new Watch(kc).watch(path, {}, onEvent, (err: unknown) => (failure ??= err));
    if (!failure) return controller;
    if ((failure as { statusCode?: number }).statusCode !== 429 || attempt >= 50) throw failure;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Fails after `ms` with `what`, so a lost event fails the test quickly and says why. */
function within<T>(ms: number, what: () => string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what()}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe('test bed smoke', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it('creates a namespace on the real API server', async () => {
    const ns = await createNamespace('smoke');
    const read = await kubeConfig().makeApiClient(CoreV1Api).readNamespace({ name: ns });
    expect(read.metadata?.name).toBe(ns);
    expect(read.status?.phase).toBe('Active');
  });

  it('applies a CRD, waits for Established, then creates, watches and status-patches a resource', async () => {
    await kubectl(['apply', '-f', '-'], { input: JSON.stringify(WIDGET_CRD) });
    const wait = await kubectl(['wait', '--for=condition=Established', '--timeout=60s', `crd/${PLURAL}.${GROUP}`]);
    expect(wait.stdout).toContain('condition met');

    const ns = await createNamespace('smoke-cr');
    const kc = kubeConfig();
    const api = kc.makeApiClient(CustomObjectsApi);
    const seen: { phase: string; status?: string }[] = [];
    let onReady: () => void = () => undefined;
    const patched = new Promise<void>((resolve) => (onReady = resolve));
    const controller = await openWatch(kc, `/apis/${GROUP}/v1/namespaces/${ns}/${PLURAL}`, (phase, obj) => {
      const status = (obj as { status?: { phase?: string } }).status?.phase;
      seen.push({ phase, status });
      if (status === 'Ready') onReady();
    });
    cleanups.push(async () => controller.abort());

    const created = await api.createNamespacedCustomObject({
      group: GROUP, version: 'v1', namespace: ns, plural: PLURAL,
      body: { apiVersion: `${GROUP}/v1`, kind: 'Widget', metadata: { name: 'w1' }, spec: { size: 3 } },
    });
    expect(created.spec.size).toBe(3);

    const after = await api.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: 'v1', namespace: ns, plural: PLURAL, name: 'w1', body: { status: { phase: 'Ready' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    expect(after.status.phase).toBe('Ready');
    await within(30_000, () => `watch saw ${JSON.stringify(seen)}`, patched);
    expect(seen[0]).toEqual({ phase: 'ADDED', status: undefined });
    expect(seen.at(-1)).toEqual({ phase: 'MODIFIED', status: 'Ready' });

    const stored = await api.getNamespacedCustomObject({ group: GROUP, version: 'v1', namespace: ns, plural: PLURAL, name: 'w1' });
    expect(stored.status.phase).toBe('Ready');
    expect(stored.spec.size).toBe(3);
  });

  it('creates a core/v1 Event and reads it back with kubectl get events -o json', async () => {
    const ns = await createNamespace('smoke-ev');
    const now = new Date();
    await kubeConfig().makeApiClient(CoreV1Api).createNamespacedEvent({
      namespace: ns,
      body: {
        metadata: { name: 'smoke-event' },
        involvedObject: { kind: 'ConfigMap', name: 'kube-root-ca.crt', namespace: ns, apiVersion: 'v1' },
        reason: 'SmokeTest',
        message: 'the test bed stores events',
        type: 'Normal',
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
        source: { component: 'gw-smoke' },
      },
    });
    const out = await kubectl(['get', 'events', '-n', ns, '-o', 'json']);
    const items = (JSON.parse(out.stdout) as { items: { reason: string; message: string; source: { component: string } }[] }).items;
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ reason: 'SmokeTest', message: 'the test bed stores events', source: { component: 'gw-smoke' } });
  });

  it('serves SET/GET and EVALSHA through ioredis on the run Redis', async () => {
    const redis = new Redis(testEnv().redisUrl, { maxRetriesPerRequest: 1 });
    cleanups.push(() => redis.quit());
    const key = `smoke:${process.pid}:${Date.now()}`;
    expect(await redis.set(key, 'v1')).toBe('OK');
    expect(await redis.get(key)).toBe('v1');

    const sha = (await redis.script('LOAD', "return redis.call('INCRBY', KEYS[1], ARGV[1])")) as string;
    expect(sha).toMatch(/^[0-9a-f]{40}$/);
    expect(await redis.evalsha(sha, 1, `${key}:n`, 5)).toBe(5);
    expect(await redis.evalsha(sha, 1, `${key}:n`, 2)).toBe(7);
    expect(await redis.get(`${key}:n`)).toBe('7');
    await redis.del(key, `${key}:n`);
  });

  it('answers kubectl version with the pinned server version', async () => {
    const out = await kubectl(['version', '-o', 'json']);
    expect(out.code).toBe(0);
    const v = JSON.parse(out.stdout) as { serverVersion: { gitVersion: string; major: string; minor: string } };
    expect(v.serverVersion).toMatchObject({ gitVersion: 'v1.33.13', major: '1', minor: '33' });
  });

  it('runs the pinned helm, whose kubeVersion check passes against the control plane', async () => {
    const env = testEnv();
    const version = await run(env.helmBin, ['version', '--short']);
    expect(version.stdout.trim()).toMatch(/^v3\.18\.6/);

    const ns = await createNamespace('smoke-helm');
    const chart = mkdtempSync(join(tmpdir(), 'gw-smoke-chart-'));
    cleanups.push(async () => rmSync(chart, { recursive: true, force: true }));
    mkdirSync(join(chart, 'templates'));
    writeFileSync(join(chart, 'Chart.yaml'), 'apiVersion: v2\nname: smoke\nversion: 0.1.0\nkubeVersion: ">=1.32.0-0"\n');
    writeFileSync(join(chart, 'templates', 'cm.yaml'),
      'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smoke-helm\ndata:\n  k8s: "{{ .Capabilities.KubeVersion.Version }}"\n');
    const helmEnv = { ...process.env, KUBECONFIG: env.kubeconfig, HELM_CACHE_HOME: join(chart, '.cache'),
      HELM_CONFIG_HOME: join(chart, '.config'), HELM_DATA_HOME: join(chart, '.data') };
    const install = await run(env.helmBin, ['install', 'smoke', chart, '-n', ns, '--wait', '--timeout', '60s'], { env: helmEnv });
    expect(install.stdout).toContain('STATUS: deployed');

    const cm = await kubeConfig().makeApiClient(CoreV1Api).readNamespacedConfigMap({ name: 'smoke-helm', namespace: ns });
    expect(cm.data?.k8s).toBe('v1.33.13');
  });
});
