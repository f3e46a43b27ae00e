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

/**
 * A throw-away CA, the API server's serving certificate (127.0.0.1, localhost and the
 * in-cluster names), an admin client certificate in system:masters, and the service
 * account signing key pair. P-256 keys keep generation fast.
 */
export async function generateCerts(dir: string): Promise<ControlPlaneCerts> {
  mkdirSync(dir, { recursive: true });
  const f = (name: string): string => join(dir, name);
  const step = async (args: string[]): Promise<void> => {
    try {
      await run('openssl', args, { cwd: dir });
    } catch (err) {
      const log = f('openssl.log');
      writeFileSync(log, `openssl ${args.join(' ')}\n${(err as { stderr?: string }).stderr ?? String(err)}\n`, { flag: 'a' });
      throw stepFailed('generate-certs', log, `openssl ${args[0]} failed`);
    }
  };
  const issue = async (name: string, subject: string, ext: string): Promise<void> => {
    writeFileSync(f(`${name}.ext`), ext);
    await step(['req', ...EC_KEY, '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`), '-subj', subject]);
    await step(['x509', '-req', '-in', f(`${name}.csr`), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-days', '30', '-out', f(`${name}.crt`), '-extfile', f(`${name}.ext`)]);
  };
  await step(['req', '-x509', ...EC_KEY, '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '30', '-subj', '/CN=gw-test-ca']);
  await issue('apiserver', '/CN=kube-apiserver', [
    'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    'extendedKeyUsage=serverAuth',
    '',
  ].join('\n'));
  await issue('admin', '/O=system:masters/CN=admin', 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n');
  await step(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', f('sa.key')]);
  await step(['ec', '-in', f('sa.key'), '-pubout', '-out', f('sa.pub')]);
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
