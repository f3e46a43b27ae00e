import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CompiledConfig } from '../../../crds/compiled.ts';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import type { ConfigSource } from '../../../sidecar/config/source.ts';
import { call, compiledApi, compiledConfig, sidecarOptions, startTestSidecar, uniqueId, type CallResult } from './helpers.ts';

/** A source whose first config comes only when the test lets it: the start-up window held open. */
class HeldSource implements ConfigSource {
  readonly name = 'held';
  readonly #config: CompiledConfig;
  #release: () => void = () => undefined;
  readonly #released = new Promise<void>((resolve) => (this.#release = resolve));

  constructor(config: CompiledConfig) {
    this.#config = config;
  }

  async start(publish: (config: CompiledConfig) => void): Promise<void> {
    await this.#released;
    publish(this.#config);
  }

  release(): void {
    this.#release();
  }

  reload(): Promise<void> {
    return Promise.resolve();
  }

  stop(): Promise<void> {
    this.#release();
    return Promise.resolve();
  }

  problems(): [] {
    return [];
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The first answer the URL gives once something accepts there (bounded). */
async function firstAnswer(url: string): Promise<CallResult> {
  for (let i = 0; i < 200; i++) {
    try {
      return await call(url);
    } catch {
      await sleep(25);
    }
  }
  throw new Error(`nothing answered at ${url}`);
}

describe('a gateway whose first config has not been applied yet', () => {
  let upstream: EchoUpstream;
  beforeAll(async () => {
    upstream = await startEchoUpstream();
  });
  afterAll(async () => {
    await upstream?.close();
  });

  it('answers 503 not_ready on the proxy port, not 404 for an API it is about to serve, then serves it', async () => {
    const api = compiledApi(uniqueId('early'), upstream.url);
    const source = new HeldSource(compiledConfig([api]));
    const [proxyPort, healthPort] = [await freePort(), await freePort()];
    const starting = startTestSidecar(
      { ...sidecarOptions('default'), listen: `127.0.0.1:${proxyPort}`, healthListen: `127.0.0.1:${healthPort}` },
      { source },
    );
    let sidecar: RunningSidecar | undefined;
    try {
      const early = await firstAnswer(`http://127.0.0.1:${proxyPort}/${api.api_id}/`);
      expect(early.status).toBe(503);
      expect(early.headers['x-gw-error-code']).toBe('not_ready');
      expect(early.json()).toEqual({ error: 'Gateway not ready: its configuration is still loading' });
      expect((await call(`http://127.0.0.1:${healthPort}/readyz`)).status).toBe(503);
      source.release();
      sidecar = await starting;
      expect((await call(`${sidecar.proxyUrl}/${api.api_id}/`)).status).toBe(200);
    } finally {
      source.release();
      await (sidecar ?? (await starting.catch(() => undefined)))?.close();
    }
  }, 20_000);
});
