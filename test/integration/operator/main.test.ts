import { spawn } from 'node:child_process';
import { CoordinationV1Api } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { createNamespace, kubeConfig, testEnv } from '../../harness/index.ts';
import { client, freePort, ready, waitFor } from './support.ts';

const root = new URL('../../../', import.meta.url).pathname;

function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  const child = spawn(process.execPath, ['operator/main.ts', ...args], { cwd: root, env: { ...process.env, GW_LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exited, out: () => stdout, err: () => stderr };
}

describe('gw-operator bin', () => {
  it('--help lists every flag and environment variable', async () => {
    const help = run(['--help']);
    expect(await help.exited).toBe(0);
    for (const needle of ['--redis-url', 'GW_REDIS_URL', '--watch-namespaces', 'GW_WATCH_NAMESPACES', '--webhook-failure-policy', 'GW_WEBHOOK_FAILURE_POLICY', 'GW_SIDECAR_IMAGE', 'GW_LEADER_ELECTION']) {
      expect(help.out()).toContain(needle);
    }
  });

  it('refuses invalid options and settings with a message naming them', async () => {
    const badOption = run([], { GW_REDIS_URL: 'redis://127.0.0.1:1', GW_WEBHOOK: 'false', GW_WEBHOOK_FAILURE_POLICY: 'Sometimes' });
    expect(await badOption.exited).toBe(2);
    expect(badOption.err()).toContain('GW_WEBHOOK_FAILURE_POLICY');
    const badSetting = run([], { GW_REDIS_URL: 'redis://127.0.0.1:1', GW_WEBHOOK: 'false', GW_DRL_THRESHOLD: '-3' });
    expect(await badSetting.exited).toBe(2);
    expect(badSetting.err()).toContain('drl_threshold');
    // A sidecar default every injected pod would be killed with stops the operator instead.
    const smallSidecar = run([], { GW_REDIS_URL: 'redis://127.0.0.1:1', GW_WEBHOOK: 'false', GW_SIDECAR_RESOURCES: '{"limits":{"memory":"32Mi"}}' });
    expect(await smallSidecar.exited).toBe(2);
    expect(smallSidecar.err()).toContain('GW_SIDECAR_RESOURCES): the gw-sidecar memory limit 32Mi is under 64Mi');
  });

  it('runs against the API server, reconciles, and on SIGTERM releases its lease and exits 0', async () => {
    const kc = kubeConfig();
    const c = client(kc);
    const ns = await createNamespace('operator-bin');
    const healthPort = await freePort();
    const bin = run(['--webhook', 'false', '--health-listen', `127.0.0.1:${healthPort}`, '--lease-duration-seconds', '5'], {
      KUBECONFIG: testEnv().kubeconfig,
      GW_REDIS_URL: testEnv().redisUrl,
      GW_WATCH_NAMESPACES: ns,
      GW_OPERATOR_NAMESPACE: ns,
      GW_INSTANCE_ID: 'bin-test',
      GW_RATE_LIMIT_RESPONSE_HEADERS: 'rate_limits',
    });
    try {
      await c.create('ApiDefinition', ns, {
        metadata: { name: 'from-bin' },
        spec: { api_id: `${ns}-bin`, use_keyless: true, proxy: { listen_path: '/bin/', target_url: 'http://127.0.0.1:9000' } },
      });
      const api = await waitFor('Ready', async () => {
        const obj = await c.get('ApiDefinition', ns, 'from-bin');
        return ready(obj)?.status === 'True' ? obj : undefined;
      });
      expect(api.status?.configMap).toBe('gw-api-from-bin');
      const cm = await c.configMap(ns, 'gw-api-from-bin');
      expect(JSON.parse(cm!.data!['config.json']!).settings.rate_limit_response_headers).toBe('rate_limits');
      // The API server names a write's field manager after the writer's User-Agent (gw-operator/<version>) up to its `/`.
      expect(cm!.metadata?.managedFields?.map((f) => f.manager)).toEqual(['gw-operator']);
      expect(api.metadata?.managedFields).toContainEqual(expect.objectContaining({ manager: 'gw-operator', subresource: 'status' }));
      expect((await fetch(`http://127.0.0.1:${healthPort}/readyz`)).status).toBe(200);
    } finally {
      bin.child.kill('SIGTERM');
    }
    expect(await bin.exited).toBe(0);
    const lease = await kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ namespace: ns, name: 'gw-operator-leader' });
    expect(lease.spec?.holderIdentity ?? '').toBe('');
  });
});
