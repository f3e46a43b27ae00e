import { execFile } from 'node:child_process';
import { createPrivateKey, randomBytes, X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The webhook's PKI as stored in its Secret (PEM strings). */
export interface WebhookPki {
  caCert: string;
  caKey: string;
  tlsCert: string;
  tlsKey: string;
}

export const CA_DAYS = 365;
export const SERVING_DAYS = 90;
const DAY_MS = 24 * 60 * 60 * 1000;
const CA_NAME = 'gw-webhook-ca';

/** DNS names of the webhook Service, and loopback for the URL form used outside a cluster. */
export function servingNames(service: string | undefined, namespace: string): { dns: string[]; ips: string[] } {
  const dns = service ? [service, `${service}.${namespace}`, `${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`] : [];
  return { dns: dns.length > 0 ? dns : ['localhost'], ips: ['127.0.0.1'] };
}

/**
 * Whether the PKI must be (re)issued: missing, a CA or serving certificate in the last
 * third of its life, a key that is not its certificate's (a TLS server cannot load such a
 * pair, nor openssl sign with such a CA), or a serving certificate that does not cover the
 * current names. node:crypto can read X.509 but not write it, hence openssl below for issuing.
 */
export function rotationNeeded(pki: WebhookPki | undefined, names: { dns: string[]; ips: string[] }, now = Date.now()): 'ca' | 'serving' | 'none' {
  if (!pki) return 'ca';
  const ca = parse(pki.caCert);
  if (!ca || nearExpiry(ca, now) || !keyFits(ca, pki.caKey)) return 'ca';
  // A CA that still holds is kept, whatever became of the serving pair: other replicas may still serve under it.
  const serving = parse(pki.tlsCert);
  if (!serving || !serving.checkIssued(ca) || nearExpiry(serving, now) || !keyFits(serving, pki.tlsKey)) return 'serving';
  const covered = names.dns.every((dns) => serving.checkHost(dns, { wildcards: false }) === dns) && names.ips.every((ip) => serving.checkIP(ip) === ip);
  return covered ? 'none' : 'serving';
}

function parse(pem: string): X509Certificate | undefined {
  try {
    return new X509Certificate(pem);
  } catch {
    return undefined;
  }
}

function keyFits(cert: X509Certificate, keyPem: string): boolean {
  try {
    return cert.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}

function nearExpiry(cert: X509Certificate, now: number): boolean {
  const from = Date.parse(cert.validFrom);
  const to = Date.parse(cert.validTo);
  return now > to - (to - from) / 3 || now < from - DAY_MS;
}

/** How many CAs the webhook configuration's caBundle holds at most. */
export const MAX_TRUSTED_CAS = 3;

/**
 * The CAs the API server is to trust, as PEM: this PKI's CA and the one it replaced, then the
 * CAs the live configuration trusts that are still good. A replica that has not yet reloaded
 * the Secret serves a certificate of an older CA (a Secret deleted and issued anew holds no
 * previous CA), and the API server must keep trusting it until then. Only self-signed CAs of
 * this webhook's name are kept, unexpired, and no more than MAX_TRUSTED_CAS: the oldest go first.
 */
export function trustedCas(ours: string[], live: string, now = Date.now()): string {
  const kept = new Map<string, string>();
  for (const pem of [...ours, ...(live.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [])]) {
    const cert = parse(pem);
    if (kept.size < MAX_TRUSTED_CAS && cert && isWebhookCa(cert, now)) kept.set(cert.fingerprint256, cert.toString());
  }
  return [...kept.values()].join('');
}

function isWebhookCa(cert: X509Certificate, now: number): boolean {
  return cert.ca && cert.subject === `CN=${CA_NAME}` && cert.checkIssued(cert) && Date.parse(cert.validTo) > now;
}

/**
 * SIGKILL when openssl overruns: a child that hangs before it runs openssl still has the signals
 * Node blocked for the fork, so a SIGTERM would wait with it, and the issuance with them.
 */
async function openssl(dir: string, args: string[], timeoutMs: number): Promise<void> {
  await run('openssl', args, { cwd: dir, timeout: timeoutMs, killSignal: 'SIGKILL' });
}

/** How long each openssl call may take before it is killed and the issuance fails. */
export interface IssueOptions {
  timeoutMs?: number;
}

const OPENSSL_TIMEOUT_MS = 30_000;

/** A new self-signed CA (P-256). */
export async function issueCa({ timeoutMs = OPENSSL_TIMEOUT_MS }: IssueOptions = {}): Promise<Pick<WebhookPki, 'caCert' | 'caKey'>> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-ca-'));
  try {
    await openssl(dir, [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
      '-keyout', 'ca.key', '-out', 'ca.crt', '-days', String(CA_DAYS), '-subj', `/CN=${CA_NAME}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ], timeoutMs);
    return { caCert: await readFile(join(dir, 'ca.crt'), 'utf8'), caKey: await readFile(join(dir, 'ca.key'), 'utf8') };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A serving certificate signed by the CA for the given names. */
export async function issueServing(ca: Pick<WebhookPki, 'caCert' | 'caKey'>, names: { dns: string[]; ips: string[] }, { timeoutMs = OPENSSL_TIMEOUT_MS }: IssueOptions = {}): Promise<WebhookPki> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-tls-'));
  try {
    await writeFile(join(dir, 'ca.crt'), ca.caCert);
    await writeFile(join(dir, 'ca.key'), ca.caKey, { mode: 0o600 });
    const san = [...names.dns.map((d) => `DNS:${d}`), ...names.ips.map((ip) => `IP:${ip}`)].join(',');
    await writeFile(
      join(dir, 'ext.cnf'),
      `subjectAltName=${san}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=critical,CA:FALSE\n`,
    );
    await openssl(dir, ['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'tls.key', '-out', 'tls.csr', '-subj', `/CN=${names.dns[0]}`], timeoutMs);
    await openssl(dir, [
      'x509', '-req', '-in', 'tls.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', `0x${randomBytes(16).toString('hex')}`,
      '-days', String(SERVING_DAYS), '-extfile', 'ext.cnf', '-out', 'tls.crt',
    ], timeoutMs);
    return { ...ca, tlsCert: await readFile(join(dir, 'tls.crt'), 'utf8'), tlsKey: await readFile(join(dir, 'tls.key'), 'utf8') };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
