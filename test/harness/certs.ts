import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { stepFailed } from './errors.ts';

const run = promisify(execFile);

export interface ControlPlaneCerts {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export const CLIENT_EXT = 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n';

/** The extension file of a serving certificate for these names (IP addresses or DNS names). */
export function serverExt(names: string[]): string {
  const san = names.map((n) => (/^[\d.]+$/.test(n) ? `IP:${n}` : `DNS:${n}`)).join(',');
  return `subjectAltName=${san}\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n`;
}

/** Issues P-256 certificates from a throw-away CA kept in `dir` (openssl CLI). */
export class CertIssuer {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
    mkdirSync(dir, { recursive: true });
  }

  path(name: string): string {
    return join(this.dir, name);
  }

  async createCa(commonName: string): Promise<void> {
    await this.openssl(['req', '-x509', ...EC_KEY, '-keyout', this.path('ca.key'), '-out', this.path('ca.crt'), '-days', '30', '-subj', `/CN=${commonName}`]);
  }

  /** Writes `<name>.crt` and `<name>.key`, signed by the CA. */
  async issue(name: string, subject: string, ext: string): Promise<void> {
    const f = (n: string): string => this.path(n);
    writeFileSync(f(`${name}.ext`), ext);
    await this.openssl(['req', ...EC_KEY, '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`), '-subj', subject]);
    await this.openssl(['x509', '-req', '-in', f(`${name}.csr`), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-days', '30', '-out', f(`${name}.crt`), '-extfile', f(`${name}.ext`)]);
  }

  /** The service-account signing key pair `sa.key` / `sa.pub`. */
  async serviceAccountKeys(): Promise<void> {
    await this.openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', this.path('sa.key')]);
    await this.openssl(['ec', '-in', this.path('sa.key'), '-pubout', '-out', this.path('sa.pub')]);
  }

  private async openssl(args: string[]): Promise<void> {
    try {
      await run('openssl', args, { cwd: this.dir });
    } catch (err) {
      const log = this.path('openssl.log');
      writeFileSync(log, `openssl ${args.join(' ')}\n${(err as { stderr?: string }).stderr ?? String(err)}\n`, { flag: 'a' });
      throw stepFailed('generate-certs', log, `openssl ${args[0]} failed`);
    }
  }
}

/**
 * A throw-away CA, the API server's serving certificate (127.0.0.1, localhost and the
 * in-cluster names), an admin client certificate in system:masters, and the service
 * account signing key pair. P-256 keys keep generation fast.
 */
export async function generateCerts(dir: string): Promise<ControlPlaneCerts> {
  const certs = new CertIssuer(dir);
  await certs.createCa('gw-test-ca');
  await certs.issue('apiserver', '/CN=kube-apiserver',
    serverExt(['127.0.0.1', 'localhost', '10.0.0.1', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc']));
  await certs.issue('admin', '/O=system:masters/CN=admin', CLIENT_EXT);
  await certs.serviceAccountKeys();
  const f = (n: string): string => certs.path(n);
  return {
    dir,
    caCert: f('ca.crt'),
    serverCert: f('apiserver.crt'),
    serverKey: f('apiserver.key'),
    clientCert: f('admin.crt'),
    clientKey: f('admin.key'),
    serviceAccountKey: f('sa.key'),
    serviceAccountPub: f('sa.pub'),
  };
}
