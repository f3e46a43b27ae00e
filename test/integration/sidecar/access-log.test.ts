import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEchoUpstream, type EchoUpstream } from '../../../demo/upstream.ts';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import { createNamespace } from '../../harness/index.ts';
import { collectingLogger } from '../../support/collecting-logger.ts';
import { call, compiledApi, deployApi, eventually, sidecarOptions, startTestSidecar, uniqueId } from './helpers.ts';

/** GW_LOG_LEVEL=trace: a line per answered request, an access log that carries no URL. */
describe.each(['undici', 'http-proxy'] as const)('the access log at trace level (forwarder %s)', (forwarder) => {
  let namespace: string;
  let upstream: EchoUpstream;
  let sidecar: RunningSidecar;
  const logs: string[] = [];
  const linesOf = (requestId: string): Record<string, unknown>[] =>
    logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.reqId === requestId);

  beforeAll(async () => {
    namespace = await createNamespace(`sc-access-${forwarder}`);
    upstream = await startEchoUpstream();
    sidecar = await startTestSidecar(sidecarOptions(namespace), { env: { GW_FORWARDER: forwarder, GW_MAX_REQUEST_BODY_BYTES: '1024' }, logger: collectingLogger(logs, 'trace') });
  });

  afterAll(async () => {
    await sidecar?.close();
    await upstream?.close();
  });

  it('logs each answered request once, with its id, API, method and status, and never its URL', async () => {
    const api = compiledApi(uniqueId('access'), upstream.url, { keyless: true });
    await deployApi(sidecar, namespace, api);
    const res = await call(`${sidecar.proxyUrl}/${api.api_id}/orders?api_key=query-secret`, { headers: { 'x-request-id': 'access-1' } });
    expect(res.status).toBe(200);
    await eventually(() => linesOf('access-1').length > 0, 5000, 'the access line');
    expect(linesOf('access-1')).toHaveLength(1);
    expect(linesOf('access-1')[0]).toMatchObject({ level: 10, msg: 'request answered', api: api.api_id, method: 'GET', status: 200 });
    // A refusal is logged as one (debug), not as answered.
    expect((await call(`${sidecar.proxyUrl}/${uniqueId('nothing')}/x`, { headers: { 'x-request-id': 'access-2' } })).status).toBe(404);
    await eventually(() => linesOf('access-2').length > 0, 5000, 'the refusal line');
    expect(linesOf('access-2')).toEqual([expect.objectContaining({ msg: 'request refused', status: 404 })]);
    // So is a body over max_request_body_bytes, which the forwarder refuses.
    const tooLarge = await call(`${sidecar.proxyUrl}/${api.api_id}/upload`, { method: 'POST', body: 'x'.repeat(2048), headers: { 'x-request-id': 'access-3' } });
    expect(tooLarge.status).toBe(413);
    await eventually(() => linesOf('access-3').length > 0, 5000, 'the 413 line');
    expect(linesOf('access-3')).toEqual([expect.objectContaining({ level: 20, msg: 'request refused', api: api.api_id, method: 'POST', status: 413, code: 'body_too_large' })]);
    expect(logs.join('')).not.toContain('query-secret');
    expect(logs.join('')).not.toContain('/orders');
  });
});
