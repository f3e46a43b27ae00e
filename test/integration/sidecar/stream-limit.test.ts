import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { GatewaySettings } from '../../../crds/settings.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import { READ_AGAIN_MS } from '../../../sidecar/limits/heartbeat.ts';
import { HandSource } from '../../support/hand-source.ts';
import { call, compiledApi, compiledConfig, newRedis, sidecarOptions, startTestSidecar, storeSession, uniqueId, type CallResult } from './helpers.ts';

/**
 * The stream rate-limit resource on the upstream call: requests wait their turn (first
 * come, first served) up to stream_rate_limit_max_wait_ms, by default upstream_timeout_ms;
 * only a request that would wait longer is refused, at once, with 429.
 */

let upstream: EchoUpstream;
let sidecar: RunningSidecar | undefined;

beforeAll(async () => {
  upstream = await startEchoUpstream();
});
afterAll(async () => {
  await upstream?.close();
});
afterEach(async () => {
  await sidecar?.close();
  sidecar = undefined;
});

/** A sidecar serving one keyless API behind a resource of 2 per 1 s; 6 concurrent calls, each with its time. */
async function sixAtOnce(settings: Partial<GatewaySettings>): Promise<{ res: CallResult; ms: number }[]> {
  const api = compiledApi(uniqueId('stream'), upstream.url, { stream_limit: { label: 'upstream', count: 2, interval_ms: 1000 } });
  sidecar = await startTestSidecar(sidecarOptions('default'), { source: new HandSource(compiledConfig([api], settings)) });
  const url = `${sidecar.proxyUrl}/${api.api_id}/`;
  const started = Date.now();
  const answers = await Promise.all(Array.from({ length: 6 }, () => call(url).then((res) => ({ res, ms: Date.now() - started }))));
  return answers.sort((x, y) => x.ms - y.ms);
}

describe('stream rate-limit resource: callers wait their turn', () => {
  it('6 concurrent requests at 2 per 1 s all get 200, two per second, taking at least 2 s', async () => {
    const answers = await sixAtOnce({});
    expect(answers.map((a) => a.res.status)).toEqual([200, 200, 200, 200, 200, 200]);
    for (const a of answers) expect(a.res.json()).toMatchObject({ method: 'GET' });
    const ms = answers.map((a) => a.ms);
    expect(ms[1]!).toBeLessThan(900);
    expect(ms[2]!).toBeGreaterThanOrEqual(1000);
    expect(ms[3]!).toBeLessThan(1900);
    expect(ms[4]!).toBeGreaterThanOrEqual(2000);
    expect(ms[5]!).toBeGreaterThanOrEqual(2000);
  }, 20_000);

  it('a client that leaves while it waits moves the clients behind it up one place', async () => {
    const api = compiledApi(uniqueId('stream'), upstream.url, { stream_limit: { label: 'upstream', count: 1, interval_ms: 1000 } });
    sidecar = await startTestSidecar(sidecarOptions('default'), { source: new HandSource(compiledConfig([api], {})) });
    const url = `${sidecar.proxyUrl}/${api.api_id}/`;
    expect((await call(url)).status).toBe(200);
    const started = Date.now();
    const leaving = new AbortController();
    const left = fetch(url, { signal: leaving.signal }).then((res) => res.status, (error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const behind = [call(url), call(url)].map((p) => p.then((res) => ({ status: res.status, ms: Date.now() - started })));
    await new Promise((resolve) => setTimeout(resolve, 100));
    leaving.abort(new Error('client went away'));
    expect(await left).toMatchObject({ message: 'client went away' });
    const answers = (await Promise.all(behind)).sort((x, y) => x.ms - y.ms);
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    // The slots at 1 s and 2 s, which the leaving client and the first behind it held; not 2 s and 3 s.
    expect(answers[0]!.ms).toBeLessThan(1_800);
    expect(answers[1]!.ms).toBeGreaterThanOrEqual(1_000);
    expect(answers[1]!.ms).toBeLessThan(2_800);
  }, 20_000);

  it.each([
    ['stream_rate_limit_max_wait_ms', { stream_rate_limit_max_wait_ms: 1500 }],
    ['upstream_timeout_ms, the default bound', { upstream_timeout_ms: 1500 }],
  ])('a request whose turn is further away than %s is refused at once with 429', async (_name, settings) => {
    const answers = await sixAtOnce(settings);
    const served = answers.filter((a) => a.res.status === 200);
    const refused = answers.filter((a) => a.res.status !== 200);
    expect(served).toHaveLength(4);
    expect(refused).toHaveLength(2);
    for (const { res, ms } of refused) {
      // Refused on arrival (its slot was 2 s away), not after waiting.
      expect(ms).toBeLessThan(700);
      expect(res.status).toBe(429);
      expect(res.json()).toEqual({ error: 'Upstream rate limit exceeded' });
      expect(res.headers['content-type']).toBe('application/json');
      expect(res.headers['retry-after']).toBe('2');
    }
    expect(Math.max(...served.map((a) => a.ms))).toBeGreaterThanOrEqual(1000);
  }, 20_000);

  it('a config that raises the resource, or takes it away, applies at once to the callers already waiting', async () => {
    const id = uniqueId('stream');
    const withLimit = (count: number) => compiledApi(id, upstream.url, { stream_limit: { label: 'upstream', count, interval_ms: 10_000 } });
    const source = new HandSource(compiledConfig([withLimit(1)], {}));
    sidecar = await startTestSidecar(sidecarOptions('default'), { source });
    const url = `${sidecar.proxyUrl}/${id}/`;
    const started = Date.now();
    const timed = () => call(url).then((res) => ({ status: res.status, ms: Date.now() - started }));
    // One now, the others 10, 20 and 30 s later (within the default wait, the upstream timeout):
    // raised to 3 per 10 s, the next two go at once.
    const first = await timed();
    const queued = [timed(), timed(), timed()];
    await sleep(300);
    source.publish(compiledConfig([withLimit(3)], {}));
    const raised = await Promise.race([Promise.all(queued.slice(0, 2)), sleep(5_000).then(() => 'still waiting')]);
    expect(raised).toEqual([expect.objectContaining({ status: 200 }), expect.objectContaining({ status: 200 })]);
    expect(first.status).toBe(200);
    // The resource taken away: the caller still waiting (its slot 10 s on) goes now.
    source.publish(compiledConfig([compiledApi(id, upstream.url, { stream_limit: null })], {}));
    const freed = await Promise.race([queued[2]!, sleep(5_000).then(() => 'still waiting')]);
    expect(freed).toEqual(expect.objectContaining({ status: 200 }));
  }, 20_000);

  it('a throttled request holds no slot while it waits its throttle turn, and keeps the spacing once admitted', async () => {
    const arrivals: { who: string; ms: number }[] = [];
    let started = 0;
    const recording: Server = createServer((req, res) => {
      arrivals.push({ who: req.url ?? '', ms: Date.now() - started });
      res.end('ok');
    });
    await new Promise<void>((resolve) => recording.listen(0, '127.0.0.1', resolve));
    const redis = newRedis();
    try {
      const { port } = recording.address() as AddressInfo;
      const api = compiledApi(uniqueId('stream'), `http://127.0.0.1:${port}`, { keyless: false, stream_limit: { label: 'up', count: 1, interval_ms: 1000 } });
      sidecar = await startTestSidecar(sidecarOptions('default'), { source: new HandSource(compiledConfig([api], {})) });
      // The DRL's first decisions on a new API wait for the reads of its live gateways: past
      // them, each request is forwarded as soon as it has its slot, and the spacing shows.
      await sleep(READ_AGAIN_MS + 250);
      const grant = { [api.api_id]: { api_id: api.api_id } };
      // A's second request is refused by its rate and retried every second until its window has room (3 s).
      const throttled = await storeSession(redis, { rate: 1, per: 3, throttle_interval: 1, throttle_retry_limit: 4, access_rights: grant });
      const roomy = await storeSession(redis, { rate: 100, per: 1, access_rights: grant });
      const url = (who: string): string => `${sidecar!.proxyUrl}/${api.api_id}/${who}`;
      started = Date.now();
      const calls = [call(url('A1'), { headers: { authorization: throttled } }), call(url('A2'), { headers: { authorization: throttled } })];
      for (const who of ['B1', 'B2', 'B3', 'B4']) {
        await sleep(50);
        calls.push(call(url(who), { headers: { authorization: roomy } }));
      }
      expect((await Promise.all(calls)).map((res) => res.status)).toEqual([200, 200, 200, 200, 200, 200]);
      arrivals.sort((x, y) => x.ms - y.ms);
      // B1 has the slot at 1 s, which A2, still in its throttle wait, does not hold.
      expect(arrivals.find((a) => a.who === '/B1')!.ms).toBeLessThan(1_700);
      // One request a second reaches the upstream, A2's late admission included.
      for (let i = 1; i < arrivals.length; i++) expect(arrivals[i]!.ms - arrivals[i - 1]!.ms, JSON.stringify(arrivals)).toBeGreaterThanOrEqual(900);
    } finally {
      redis.disconnect();
      await new Promise((resolve) => recording.close(resolve));
    }
  }, 30_000);
});
