import { HttpMethod, KubeConfig, RequestContext } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { shareConnections } from './kube-connections.ts';

function config(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:6443', skipTLSVerify: true }],
    users: [
      { name: 'alice', token: 'a' },
      { name: 'bob', token: 'b' },
    ],
    contexts: [
      { name: 'as-alice', cluster: 'c', user: 'alice' },
      { name: 'as-bob', cluster: 'c', user: 'bob' },
    ],
    currentContext: 'as-alice',
  });
  return kc;
}

const dispatcherOf = async (kc: KubeConfig) => {
  const ctx = new RequestContext('https://127.0.0.1:6443/api', HttpMethod.GET);
  await kc.applySecurityAuthentication(ctx);
  return { dispatcher: ctx.getDispatcher(), auth: ctx.getHeaders().Authorization };
};

describe('shareConnections', () => {
  it('gives every request of one identity the same agent, keeping per-request auth headers', async () => {
    const plain = config();
    expect((await dispatcherOf(plain)).dispatcher).not.toBe((await dispatcherOf(plain)).dispatcher);

    const kc = shareConnections(config());
    const first = await dispatcherOf(kc);
    const second = await dispatcherOf(kc);
    expect(first.dispatcher).toBeDefined();
    expect(second.dispatcher).toBe(first.dispatcher);
    expect(second.auth).toBe('Bearer a');

    expect(shareConnections(kc)).toBe(kc);
    expect((await dispatcherOf(kc)).dispatcher).toBe(first.dispatcher);

    kc.setCurrentContext('as-bob');
    const bob = await dispatcherOf(kc);
    expect(bob.dispatcher).not.toBe(first.dispatcher);
    expect(bob.auth).toBe('Bearer b');
  });
});
