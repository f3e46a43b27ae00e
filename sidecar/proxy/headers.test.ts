import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { clientResponseHeaders, removeHopByHopResponseHeaders, upstreamRequestHeaders } from './headers.ts';

function request(headers: Record<string, string | string[]>, remoteAddress = '10.0.0.9'): IncomingMessage {
  return { headers, socket: { remoteAddress } } as unknown as IncomingMessage;
}

describe('upstreamRequestHeaders', () => {
  it('drops hop-by-hop headers, those named in Connection, and Host; sets X-Forwarded-*', () => {
    const out = upstreamRequestHeaders(
      request({ host: 'gw.example', connection: 'keep-alive, X-Private', 'x-private': '1', 'keep-alive': 'timeout=5', te: 'trailers', 'transfer-encoding': 'chunked', accept: 'application/json' }),
    );
    expect(out).toEqual({
      accept: 'application/json',
      'x-forwarded-for': '10.0.0.9',
      'x-forwarded-proto': 'http',
      'x-forwarded-host': 'gw.example',
    });
  });

  it("keeps the gateway's request id even when the client names it in Connection", () => {
    const out = upstreamRequestHeaders(request({ host: 'gw.example', connection: 'keep-alive, X-Request-Id, Authorization', 'x-request-id': 'id-1', authorization: 'k' }));
    expect(out).toEqual({ 'x-request-id': 'id-1', 'x-forwarded-for': '10.0.0.9', 'x-forwarded-proto': 'http', 'x-forwarded-host': 'gw.example' });
  });

  it('drops a plain Connection: keep-alive and its Keep-Alive, whatever the case of the name it gives', () => {
    for (const connection of ['keep-alive', 'Keep-Alive']) {
      const out = upstreamRequestHeaders(request({ host: 'gw.example', connection, 'keep-alive': 'timeout=5', accept: 'text/plain' }));
      expect(out).toEqual({ accept: 'text/plain', 'x-forwarded-for': '10.0.0.9', 'x-forwarded-proto': 'http', 'x-forwarded-host': 'gw.example' });
    }
  });

  it('appends to an existing X-Forwarded-For and keeps an earlier proxy proto and host', () => {
    const out = upstreamRequestHeaders(request({ host: 'inner', 'x-forwarded-for': '1.2.3.4', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'outer' }));
    expect(out['x-forwarded-for']).toBe('1.2.3.4, 10.0.0.9');
    expect(out['x-forwarded-proto']).toBe('https');
    expect(out['x-forwarded-host']).toBe('outer');
  });
});

describe('clientResponseHeaders', () => {
  const upstream = { 'content-type': 'text/plain', connection: 'close', 'x-ratelimit-limit': '9', 'x-ratelimit-remaining': '8', 'set-cookie': ['a=1', 'b=2'] };

  it('replaces the upstream X-RateLimit-* with the gateway ones', () => {
    expect(clientResponseHeaders(upstream, { 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '1', 'x-ratelimit-reset': '100' }, {})).toEqual({
      'content-type': 'text/plain',
      'set-cookie': ['a=1', 'b=2'],
      'x-ratelimit-limit': '2',
      'x-ratelimit-remaining': '1',
      'x-ratelimit-reset': '100',
    });
  });

  it('passes the upstream X-RateLimit-* when the gateway sets none', () => {
    expect(clientResponseHeaders(upstream, null, {})['x-ratelimit-limit']).toBe('9');
  });

  it("puts the gateway's own headers on the answer in place of the upstream's of the same name", () => {
    const out = clientResponseHeaders({ ...upstream, 'x-request-id': 'upstream-own' }, null, { 'x-request-id': 'gw-id' });
    expect(out['x-request-id']).toBe('gw-id');
    expect(out['content-type']).toBe('text/plain');
  });
});

describe('removeHopByHopResponseHeaders', () => {
  it('keeps Connection and Transfer-Encoding for http-proxy to manage, drops the rest', () => {
    const headers: Record<string, unknown> = { connection: 'close, x-hop', 'x-hop': '1', 'keep-alive': 'timeout=5', 'transfer-encoding': 'chunked', etag: '"1"' };
    removeHopByHopResponseHeaders(headers);
    expect(headers).toEqual({ connection: 'close, x-hop', 'transfer-encoding': 'chunked', etag: '"1"' });
  });
});
