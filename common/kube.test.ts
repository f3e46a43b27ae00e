import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadKubeConfig, SERVICE_ACCOUNT_TOKEN } from './kube.ts';

describe('loadKubeConfig', () => {
  afterEach(() => vi.unstubAllEnvs());

  // A host with a token of its own (the tests run in a pod) has nothing to show here.
  it.skipIf(existsSync(SERVICE_ACCOUNT_TOKEN))('says there is no service-account token, in a pod that mounts none, and outside a pod that there is no kubeconfig, rather than calling localhost:8080', () => {
    vi.stubEnv('KUBECONFIG', '');
    vi.stubEnv('HOME', mkdtempSync(join(tmpdir(), 'gw-kube-')));
    vi.stubEnv('KUBERNETES_SERVICE_HOST', '10.0.0.1');
    expect(() => loadKubeConfig('gw-sidecar')).toThrow(
      'no service-account token at /var/run/secrets/kubernetes.io/serviceaccount/token: this container runs in a pod (KUBERNETES_SERVICE_HOST is set) but none is mounted in it, so it cannot reach the API server',
    );
    // Outside a pod, no kubeconfig at all is said as such.
    vi.stubEnv('KUBERNETES_SERVICE_HOST', '');
    expect(() => loadKubeConfig('gw-sidecar')).toThrow('no kubeconfig: give --kubeconfig (KUBECONFIG), or put one at ~/.kube/config');
  });
});
