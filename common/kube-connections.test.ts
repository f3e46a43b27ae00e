import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpMethod, KubeConfig, RequestContext } from '@kubernetes/client-node';
import { Agent, fetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { retryWhenShedding, SHED_RETRIES, shareConnections } from './kube-connections.ts';

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

describe('retryWhenShedding', () => {
  const waits = { firstMs: 20, longestMs: 100 };
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    await Promise.all(closers.splice(0).map((close) => close()));
  });

  /**
   * A loopback server that gives each request, by its number from 0, the answer of `answer`:
   * `send` calls it through the shedding retries; `bodies` and `at` are what it was sent, when.
   */
  async function server(answer: (n: number, res: ServerResponse) => void): Promise<{ url: string; send: typeof fetch; bodies: string[]; at: number[] }> {
    const bodies: string[] = [];
    const at: number[] = [];
    const http = createServer((req: IncomingMessage, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        at.push(performance.now());
        answer(bodies.push(body) - 1, res);
      });
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const agent = new Agent();
    closers.push(async () => {
      await agent.close();
      await new Promise((resolve) => http.close(resolve));
    });
    const dispatcher = agent.compose(retryWhenShedding(waits));
    const send: typeof fetch = (input, init) => fetch(input, { ...init, dispatcher });
    return { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/api/v1/namespaces/x/configmaps`, send, bodies, at };
  }

  const shed = (res: ServerResponse, retryAfter = '0'): void => {
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': retryAfter }).end('{"kind":"Status","reason":"TooManyRequests","code":429}');
  };

  it('sends a shed create again with its body, backing off, and hands the caller the answer that came', async () => {
    const target = await server((n, res) => (n < 3 ? shed(res) : res.writeHead(201).end('created')));
    const res = await target.send(target.url, { method: 'POST', body: '{"metadata":{"name":"a"}}' });
    expect(res.status).toBe(201);
    expect(await res.text()).toBe('created');
    expect(target.bodies).toEqual(Array.from({ length: 4 }, () => '{"metadata":{"name":"a"}}'));
    // 20, 40 and 80 ms at the least (Retry-After: 0 asks for less), each at most a quarter more.
    const gaps = target.at.slice(1).map((t, i) => t - target.at[i]!);
    gaps.forEach((gap, i) => expect(gap).toBeGreaterThanOrEqual(20 * 2 ** i - 1));
    expect(gaps.reduce((a, b) => a + b)).toBeLessThan(140 * 1.25 + 1_000);
  });

  it('after SHED_RETRIES more tries hands the caller the last 429 itself, not a transport failure', async () => {
    const target = await server((_n, res) => shed(res));
    const res = await target.send(target.url);
    expect(res.status).toBe(429);
    expect(await res.json()).toMatchObject({ reason: 'TooManyRequests', code: 429 });
    expect(target.bodies).toHaveLength(1 + SHED_RETRIES);
  });

  it('waits as long as the server asks, up to the longest wait', async () => {
    const target = await server((n, res) => (n === 0 ? shed(res, '0.06') : n === 1 ? shed(res, '60') : res.writeHead(200).end()));
    expect((await target.send(target.url)).status).toBe(200);
    const [asked, capped] = [target.at[1]! - target.at[0]!, target.at[2]! - target.at[1]!];
    expect(asked).toBeGreaterThanOrEqual(59);
    expect(capped).toBeGreaterThanOrEqual(99);
    expect(capped).toBeLessThan(100 * 1.25 + 1_000);
  });

  it('hands any other answer to the caller at once', async () => {
    const target = await server((_n, res) => res.writeHead(503, { 'retry-after': '0' }).end('unavailable'));
    const res = await target.send(target.url);
    expect(res.status).toBe(503);
    expect(await res.text()).toBe('unavailable');
    expect(target.bodies).toHaveLength(1);
  });
});
