import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { limiterKey } from '../../../common/redis-keys.ts';
import { api, config } from '../../support/compiled-fixtures.ts';
import { request } from '../../support/limits-fixtures.ts';
import { testEnv } from '../../harness/index.ts';
import { sleep, uniqueId } from '../limits/helpers.ts';
import { startGateway, stopAllGateways, waitReady } from './gateways.ts';

interface AnswerHoldingHop {
  url: string;
  /** Script calls that have reached Redis. */
  scriptCalls(): number;
  /** Holds Redis's answers from now on, until `release`. */
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

/**
 * A loopback hop between a client and Redis: it passes every request on at once, counting
 * the script calls, and holds Redis's answers while told to.
 */
async function answerHoldingHop(redisUrl: string): Promise<AnswerHoldingHop> {
  const target = new URL(redisUrl);
  let holding = false;
  let scriptCalls = 0;
  const held: (() => void)[] = [];
  const sockets: Socket[] = [];
  const server = createServer((client) => {
    const redis = connect(Number(target.port), target.hostname);
    sockets.push(client, redis);
    client.on('data', (chunk) => {
      scriptCalls += chunk.toString('latin1').split(/\r\nfcall\r\n/i).length - 1;
      redis.write(chunk);
    });
    redis.on('data', (chunk) => (holding ? held.push(() => client.write(chunk)) : client.write(chunk)));
    for (const socket of [client, redis]) socket.on('error', () => undefined);
    client.on('close', () => redis.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    scriptCalls: () => scriptCalls,
    hold: () => (holding = true),
    release() {
      holding = false;
      for (const send of held.splice(0)) send();
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

describe("the sidecar's Redis client and the limit store's script calls", () => {
  let hop: AnswerHoldingHop | undefined;
  afterEach(async () => {
    await stopAllGateways();
    await hop?.close();
  });

  it('on one server, a call goes out at once, even while an earlier call is still unanswered', async () => {
    hop = await answerHoldingHop(testEnv().redisUrl);
    const a = api(uniqueId('in-flight'), { api_limit: { rate: 100, per: 60 } });
    const gateway = startGateway(config({ settings: { enable_redis_rolling_limiter: true }, apis: [a] }), hop.url);
    await waitReady(gateway.redis);
    const req = request(a, null);
    // Loads the limit function, so each call below is one FCALL.
    expect((await gateway.engine.decide(req)).outcome).toBe('allowed');
    const before = hop.scriptCalls();
    hop.hold();
    const first = gateway.engine.decide(req);
    await sleep(30);
    const second = gateway.engine.decide(req);
    await sleep(30);
    // Both reached Redis while the first one's answer was held back: the second did not wait for it.
    expect(hop.scriptCalls() - before).toBe(2);
    hop.release();
    expect((await Promise.all([first, second])).map((d) => d.outcome)).toEqual(['allowed', 'allowed']);
    expect(await gateway.redis.zcard(limiterKey(`a:${a.api_id}`, 'log'))).toBe(3);
  });
});
