import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { refusedTarget } from './request-target.ts';

/** A parsed request as Node hands it over: raw header pairs, and `headers` keeping the first Host. */
function request(url: string, rawHeaders: string[], httpVersion = '1.1'): IncomingMessage {
  const host = rawHeaders.find((_, i) => i % 2 === 1 && rawHeaders[i - 1]!.toLowerCase() === 'host');
  return { url, rawHeaders, httpVersion, headers: host === undefined ? {} : { host } } as unknown as IncomingMessage;
}

describe('refusedTarget', () => {
  it('takes one Host in any case, and none from HTTP/1.0 only', () => {
    expect(refusedTarget(request('/a', ['HOST', 'x']))).toBeNull();
    expect(refusedTarget(request('/a', ['Host', 'x', 'host', 'y']))?.code).toBe('bad_host');
    expect(refusedTarget(request('/a', ['X-Host', 'x']))?.code).toBe('bad_host');
    expect(refusedTarget(request('/a', [], '1.0'))).toBeNull();
  });

  it('serves an absolute-form target as its origin form, with its authority as the Host', () => {
    const cases: Array<[string, string, string]> = [
      ['http://api.test/v1/x?q=1', '/v1/x?q=1', 'api.test'],
      ['HTTPS://api.test:8443', '/', 'api.test:8443'],
      ['http://api.test?q=1', '/?q=1', 'api.test'],
    ];
    for (const [target, path, host] of cases) {
      const req = request(target, ['Host', 'other']);
      expect(refusedTarget(req), target).toBeNull();
      expect([req.url, req.headers.host], target).toEqual([path, host]);
    }
  });

  it('refuses an absolute-form target with no host or with a user, and leaves other forms to routing', () => {
    expect(refusedTarget(request('http:///x', ['Host', 'x']))?.code).toBe('bad_target');
    expect(refusedTarget(request('http://me:pw@api.test/x', ['Host', 'x']))?.code).toBe('bad_target');
    const asterisk = request('*', ['Host', 'x']);
    expect(refusedTarget(asterisk)).toBeNull();
    expect(asterisk.url).toBe('*');
  });

  it('refuses a dot segment with parameters, which a server that drops them reads as a dot segment', () => {
    for (const target of ['/p/public/..;/admin', '/p/public/.;/x', '/p/%2e%2E;x/y', '/p/a\\..;\\b', 'http://api.test/p/public/..;/admin?q=1']) {
      expect(refusedTarget(request(target, ['Host', 'x']))?.code, target).toBe('bad_path');
    }
    for (const target of ['/p/x;v=1', '/p/a..;/b', '/p/..a;/b', '/p/x?next=/..;/y', '/p/x#/..;/y', '/p/../x']) {
      expect(refusedTarget(request(target, ['Host', 'x'])), target).toBeNull();
    }
  });
});
