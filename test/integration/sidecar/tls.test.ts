import { X509Certificate } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningSidecar } from '../../../sidecar/app.ts';
import type { SidecarOptions } from '../../../sidecar/cli.ts';
import { CertIssuer, serverExt } from '../../harness/certs.ts';
import { createNamespace } from '../../harness/index.ts';
import { call, eventually, sidecarOptions, startTestSidecar } from './helpers.ts';

interface TlsAnswer {
  status: number;
  body: string;
  /** SHA-256 fingerprint of the certificate the server presented. */
  fingerprint: string;
  protocol: string;
}

/** One HTTPS GET that trusts only the test CA (no keep-alive, so every call sees the current certificate). */
function httpsGet(url: string, ca: string): Promise<TlsAnswer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { ca, agent: false, timeout: 5000 }, (res) => {
      const socket = res.socket as TLSSocket;
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      const protocol = socket.getProtocol() ?? '';
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), fingerprint, protocol }));
    });
    req.on('timeout', () => req.destroy(new Error('no answer in 5 s')));
    req.on('error', reject);
    req.end();
  });
}

/** A plain-HTTP GET: against a TLS listener it must get no HTTP answer. */
function plainGet(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url.replace(/^https:/, 'http:'), { agent: false, timeout: 5000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy(new Error('no answer in 5 s')));
    req.on('error', reject);
    req.end();
  });
}

const fingerprintOf = (certFile: string): string => new X509Certificate(readFileSync(certFile)).fingerprint256;

describe('the admin and proxy listeners serve TLS from a certificate and key that can be renewed in place', () => {
  let dir: string;
  let issuer: CertIssuer;
  let ca: string;
  let namespace: string;
  const logLines: string[] = [];
  const logger = pino({ level: 'info' }, new Writable({ write: (chunk, _enc, done) => { logLines.push(String(chunk)); done(); } }));
  const live = { cert: '', key: '' };
  const started: RunningSidecar[] = [];

  const tlsOptions = (extra: Partial<SidecarOptions> = {}): SidecarOptions => ({
    ...sidecarOptions(namespace),
    tlsCertFile: live.cert,
    tlsKeyFile: live.key,
    ...extra,
  });
  const start = async (options: SidecarOptions): Promise<RunningSidecar> => {
    const sidecar = await startTestSidecar(options, { logger });
    started.push(sidecar);
    return sidecar;
  };
  const install = (name: string): void => {
    copyFileSync(issuer.path(`${name}.crt`), live.cert);
    copyFileSync(issuer.path(`${name}.key`), live.key);
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gw-tls-'));
    issuer = new CertIssuer(dir);
    await issuer.createCa('gw-tls-test-ca');
    const ext = serverExt(['127.0.0.1', 'localhost']);
    await Promise.all([issuer.issue('first', '/CN=gw-first', ext), issuer.issue('second', '/CN=gw-second', ext)]);
    ca = readFileSync(issuer.path('ca.crt'), 'utf8');
    live.cert = join(dir, 'live.crt');
    live.key = join(dir, 'live.key');
    install('first');
    namespace = await createNamespace('sc-tls');
  });

  afterAll(async () => {
    await Promise.all(started.map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers on https with the certificate, in TLS 1.2 or later; plain HTTP gets no answer; health stays plain', async () => {
    const sidecar = await start(tlsOptions());
    expect(sidecar.adminUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(sidecar.proxyUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(sidecar.healthUrl).toMatch(/^http:\/\//);

    const admin = await httpsGet(`${sidecar.adminUrl}/gw/reload`, ca);
    expect(admin.status).toBe(403);
    expect(JSON.parse(admin.body)).toEqual({ status: 'error', message: 'Attempted administrative access with invalid or missing key!' });
    expect(admin.fingerprint).toBe(fingerprintOf(issuer.path('first.crt')));
    expect(['TLSv1.2', 'TLSv1.3']).toContain(admin.protocol);

    const proxy = await httpsGet(`${sidecar.proxyUrl}/no-such-api/`, ca);
    expect(proxy.status).toBe(404);
    expect(proxy.fingerprint).toBe(fingerprintOf(issuer.path('first.crt')));

    await expect(plainGet(sidecar.adminUrl)).rejects.toThrow();
    await expect(plainGet(sidecar.proxyUrl)).rejects.toThrow();
    expect((await call(`${sidecar.healthUrl}/healthz`)).status).toBe(200);
  });

  it('serves a renewed pair without a restart, and keeps the last good one while the files do not load', async () => {
    const sidecar = await start(tlsOptions());
    expect((await httpsGet(`${sidecar.adminUrl}/gw/reload`, ca)).fingerprint).toBe(fingerprintOf(issuer.path('first.crt')));

    install('second');
    const second = fingerprintOf(issuer.path('second.crt'));
    await eventually(async () => (await httpsGet(`${sidecar.adminUrl}/gw/reload`, ca)).fingerprint === second, 15_000, 'the renewed certificate');
    expect((await httpsGet(`${sidecar.proxyUrl}/no-such-api/`, ca)).fingerprint).toBe(second);
    expect(logLines.some((l) => l.includes('TLS certificate reloaded'))).toBe(true);

    // A key that is not a key: the listener says so and goes on with the pair it has.
    writeFileSync(live.key, 'not a key\n');
    await eventually(() => logLines.some((l) => l.includes('do not load')), 15_000, 'the warning about the broken pair');
    const during = await httpsGet(`${sidecar.adminUrl}/gw/reload`, ca);
    expect(during.status).toBe(403);
    expect(during.fingerprint).toBe(second);
    expect(logLines.join('')).not.toContain('PRIVATE KEY');

    // Mended with the first pair again: served again.
    install('first');
    const first = fingerprintOf(issuer.path('first.crt'));
    await eventually(async () => (await httpsGet(`${sidecar.adminUrl}/gw/reload`, ca)).fingerprint === first, 15_000, 'the mended pair');
  });

  it('does not start on a pair that cannot serve, and says which files', async () => {
    const mismatched = tlsOptions({ tlsCertFile: issuer.path('first.crt'), tlsKeyFile: issuer.path('second.key') });
    await expect(start(mismatched)).rejects.toMatchObject({ code: 'invalid_tls_files', message: expect.stringContaining('are not a usable pair') });
    const missing = tlsOptions({ tlsCertFile: join(dir, 'absent.crt') });
    await expect(start(missing)).rejects.toMatchObject({ code: 'invalid_tls_files', message: expect.stringContaining('absent.crt') });
  });

  it('--tls-listeners admin leaves the proxy on plain HTTP', async () => {
    install('first');
    const sidecar = await start(tlsOptions({ tlsListeners: new Set(['admin'] as const) }));
    expect(sidecar.adminUrl).toMatch(/^https:/);
    expect(sidecar.proxyUrl).toMatch(/^http:/);
    expect((await httpsGet(`${sidecar.adminUrl}/gw/reload`, ca)).status).toBe(403);
    expect((await call(`${sidecar.proxyUrl}/no-such-api/`)).status).toBe(404);
  });
});
