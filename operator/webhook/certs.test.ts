import { X509Certificate } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CA_DAYS, issueCa, issueServing, MAX_TRUSTED_CAS, rotationNeeded, servingNames, SERVING_DAYS, trustedCas } from './certs.ts';

const DAY = 86_400_000;

describe('webhook certificates', () => {
  it('issues a CA and a serving certificate it signed, covering the service names and loopback', async () => {
    const names = servingNames('gw-webhook', 'gw-system');
    expect(names.dns).toContain('gw-webhook.gw-system.svc');
    const pki = await issueServing(await issueCa(), names);
    const ca = new X509Certificate(pki.caCert);
    const serving = new X509Certificate(pki.tlsCert);
    expect(ca.ca).toBe(true);
    expect(serving.checkIssued(ca)).toBe(true);
    expect(serving.verify(ca.publicKey)).toBe(true);
    expect(serving.checkHost('gw-webhook.gw-system.svc')).toBe('gw-webhook.gw-system.svc');
    expect(serving.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(rotationNeeded(pki, names)).toBe('none');
  }, 30_000);

  it('asks for rotation when missing, near expiry, for other names, or unreadable', async () => {
    const names = servingNames(undefined, 'x');
    const pki = await issueServing(await issueCa(), names);
    expect(rotationNeeded(undefined, names)).toBe('ca');
    expect(rotationNeeded(pki, names, Date.now() + (SERVING_DAYS - 10) * DAY)).toBe('serving');
    expect(rotationNeeded(pki, names, Date.now() + 300 * DAY)).toBe('ca');
    expect(rotationNeeded(pki, servingNames('other', 'ns'))).toBe('serving');
    expect(rotationNeeded({ ...pki, caCert: 'garbage' }, names)).toBe('ca');
    const otherCa = await issueCa();
    expect(rotationNeeded({ ...pki, caCert: otherCa.caCert, caKey: otherCa.caKey }, names)).toBe('serving');
    expect(rotationNeeded({ ...pki, tlsCert: 'garbage' }, names)).toBe('serving');
  }, 30_000);

  it('asks for a new pair when a key is not its certificate\'s, a new CA when the CA key is not the CA\'s', async () => {
    const names = servingNames(undefined, 'x');
    const pki = await issueServing(await issueCa(), names);
    const stray = await issueServing(await issueCa(), names);
    expect(rotationNeeded({ ...pki, tlsKey: stray.tlsKey }, names)).toBe('serving');
    expect(rotationNeeded({ ...pki, tlsKey: 'garbage' }, names)).toBe('serving');
    expect(rotationNeeded({ ...pki, caKey: stray.caKey }, names)).toBe('ca');
    expect(rotationNeeded({ ...pki, caKey: '' }, names)).toBe('ca');
  }, 30_000);

  it('trusts this PKI\'s CAs first, then the still-good webhook CAs the live bundle holds, at most MAX_TRUSTED_CAS', async () => {
    const [current, previous, older, oldest] = await Promise.all([issueCa(), issueCa(), issueCa(), issueCa()]);
    const names = servingNames(undefined, 'x');
    const fingerprints = (pem: string) => (pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? []).map((c) => new X509Certificate(c).fingerprint256);
    const fp = (pem: string) => new X509Certificate(pem).fingerprint256;
    // A replica that reissued after the Secret was deleted has no previous CA: the live one stays trusted.
    expect(fingerprints(trustedCas([current.caCert, ''], previous.caCert))).toEqual([fp(current.caCert), fp(previous.caCert)]);
    // Unchanged: the same bundle, so nothing is rewritten.
    const steady = trustedCas([current.caCert, previous.caCert], current.caCert + previous.caCert);
    expect(steady).toBe(trustedCas([current.caCert, previous.caCert], steady));
    expect(fingerprints(trustedCas([current.caCert, previous.caCert], oldest.caCert + older.caCert + current.caCert))).toEqual([fp(current.caCert), fp(previous.caCert), fp(oldest.caCert)]);
    expect(MAX_TRUSTED_CAS).toBe(3);
    // Not a CA, not parseable, or expired: dropped.
    const serving = await issueServing(current, names);
    expect(fingerprints(trustedCas([current.caCert], `${serving.tlsCert}-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n${older.caCert}`)))
      .toEqual([fp(current.caCert), fp(older.caCert)]);
    expect(fingerprints(trustedCas([current.caCert], older.caCert, Date.now() + (CA_DAYS + 1) * DAY))).toEqual([]);
  }, 30_000);

  it('kills an openssl that overruns its time, though it ignores SIGTERM, and the issuance fails', async () => {
    const bin = mkdtempSync(join(tmpdir(), 'gw-wedged-openssl-'));
    const pidFile = join(bin, 'pid');
    writeFileSync(join(bin, 'openssl'), `#!/bin/sh\ntrap '' TERM\necho $$ > '${pidFile}'\nexec sleep 60\n`);
    chmodSync(join(bin, 'openssl'), 0o755);
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path ?? ''}`;
    try {
      const started = Date.now();
      await expect(issueCa({ timeoutMs: 500 })).rejects.toMatchObject({ killed: true, signal: 'SIGKILL' });
      expect(Date.now() - started).toBeLessThan(5_000);
      const pid = Number(readFileSync(pidFile, 'utf8'));
      expect(() => process.kill(pid, 0)).toThrow();
    } finally {
      process.env.PATH = path;
      rmSync(bin, { recursive: true, force: true });
    }
  });
});
