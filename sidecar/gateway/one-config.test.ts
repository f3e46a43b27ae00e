import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { loadLocalSettings } from '../../common/settings-loader.ts';
import { MemorySessionStore, type SessionStore } from '../../common/session-store.ts';
import type { CompiledConfig } from '../../crds/compiled.ts';
import { keyHash } from '../../crds/key-hash.ts';
import type { Session } from '../../crds/session.ts';
import { api, config, policy, session } from '../../test/support/compiled-fixtures.ts';
import { HandSource } from '../../test/support/hand-source.ts';
import { SessionCache } from '../auth/session-cache.ts';
import { ConfigRuntime } from '../config/runtime.ts';
import { StreamLimiters } from '../limits/stream-limiter.ts';
import type { LimitDecision, LimitEngine, LimitExplanation } from '../limits/types.ts';
import { createSidecarMetrics } from '../metrics.ts';
import type { Forwarder } from '../proxy/forwarder.ts';
import { HttpProxyForwarder } from '../proxy/http-proxy-forwarder.ts';
import { Gateway } from './gateway.ts';

/** Refuses every request, and remembers which policies it held when asked. */
class RecordingEngine implements LimitEngine {
  #policies: CompiledConfig['policies'] = {};
  readonly seen: CompiledConfig['policies'][] = [];

  decide(): Promise<LimitDecision> {
    this.seen.push(this.#policies);
    return Promise.resolve({ outcome: 'key_rate_limited', rate: null, quota: null });
  }

  throttles = (): boolean => false;

  explain(): Promise<LimitExplanation> {
    return Promise.reject(new Error('the gateway never explains'));
  }

  updateConfig(config: CompiledConfig): void {
    this.#policies = config.policies;
  }

  readonly storeFailing = false;

  close = (): Promise<void> => Promise.resolve();
}

/** Session reads wait until the test opens the gate. */
class GatedStore implements SessionStore {
  readonly #inner = new MemorySessionStore();
  readonly gate = Promise.withResolvers<void>();

  async get(hash: string): Promise<Session | null> {
    await this.gate.promise;
    return this.#inner.get(hash);
  }

  async getJson(hash: string): Promise<string | null> {
    await this.gate.promise;
    return this.#inner.getJson(hash);
  }

  put = (hash: string, value: Session): Promise<string> => this.#inner.put(hash, value);
  delete = (hash: string): Promise<void> => this.#inner.delete(hash);
}

const target = api('orders');
const granting = policy('gold', {
  access_rights: { orders: { api_id: 'orders', api_name: 'orders', limit: null, endpoints: [] } },
});
const withGrant = config({ apis: [target], policies: [granting] });
const revoked = config({ apis: [target], policies: [policy('gold')] });
const rawKey = 'one-config-test-key';

async function setup(): Promise<{ gateway: Gateway; engine: RecordingEngine; store: GatedStore; source: HandSource }> {
  const logger = pino({ level: 'silent' });
  const metrics = createSidecarMetrics();
  const engine = new RecordingEngine();
  const store = new GatedStore();
  await store.put(keyHash(rawKey), session({ apply_policies: ['gold'] }));
  const source = new HandSource(withGrant);
  const runtime = new ConfigRuntime({ source, local: loadLocalSettings(undefined, {}), engine, logger, metrics });
  await runtime.start();
  // Never reached: every request here is refused before forwarding.
  const forwarder = new HttpProxyForwarder({ timeoutMs: () => 1000, maxBodyBytes: () => 1000 });
  const forwarders: Record<'undici' | 'http-proxy', Forwarder> = { undici: forwarder, 'http-proxy': forwarder };
  const gateway = new Gateway({
    state: runtime.state,
    engine,
    sessions: new SessionCache(store),
    forwarders,
    upgrades: forwarder,
    streams: new StreamLimiters(),
    metrics,
    logger,
  });
  return { gateway, engine, store, source };
}

function request(): { req: IncomingMessage; res: ServerResponse } {
  const req = new IncomingMessage(new Socket());
  req.method = 'GET';
  req.url = '/orders/items';
  req.headers = { authorization: rawKey };
  return { req, res: new ServerResponse(req) };
}

async function answered(res: ServerResponse): Promise<number> {
  for (let i = 0; i < 100 && !res.headersSent; i++) await new Promise((resolve) => setTimeout(resolve, 5));
  return res.statusCode;
}

describe('one request sees one config', () => {
  it('authenticates and limits against the policies the engine holds', async () => {
    const { gateway, engine, store } = await setup();
    const { req, res } = request();
    gateway.handle(req, res);
    store.gate.resolve();
    expect(await answered(res)).toBe(429);
    expect(engine.seen).toEqual([withGrant.policies]);
  });

  it('starts over on the new config when a swap lands during the session read', async () => {
    const { gateway, engine, store, source } = await setup();
    const { req, res } = request();
    gateway.handle(req, res);
    // The key was granted the API when its session read began; the new config revokes that.
    source.publish(revoked);
    store.gate.resolve();
    expect(await answered(res)).toBe(403);
    expect(engine.seen).toEqual([]);
  });
});
