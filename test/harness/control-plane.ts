import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { generateCerts, type ControlPlaneCerts } from './certs.ts';
import { freePort, withPortRetry, type StartOptions } from './ports.ts';
import { serverDir, spawnServer, type ServerProcess } from './procs.ts';
import { waitReady } from './wait-ready.ts';

export interface ControlPlaneBins {
  etcd: string;
  kubeApiserver: string;
}

export interface ControlPlaneHandle {
  kubeconfig: string;
  /** https://127.0.0.1:PORT */
  server: string;
  /** Stops kube-apiserver and etcd and removes their data. */
  stop(): Promise<void>;
  /** Restarts only kube-apiserver, on the same port with the same certificates and etcd. */
  restartApiServer(): Promise<void>;
  /** Pids of the running etcd and kube-apiserver processes. */
  pids(): number[];
}

const ETCD_READY_MS = 30_000;
const APISERVER_READY_MS = 120_000;

/** etcd + kube-apiserver on free loopback ports, with client-certificate auth and RBAC. */
export async function startControlPlaneServers(bins: ControlPlaneBins, opts: StartOptions = {}): Promise<ControlPlaneHandle> {
  const pickPort = opts.pickPort ?? freePort;
  const dir = serverDir('control-plane');
  const certs = await generateCerts(join(dir, 'certs'));
  let etcd: ServerProcess | undefined;
  let apiserver: ServerProcess | undefined;
  try {
    const etcdStarted = await withPortRetry('start-etcd', () => startEtcd(bins.etcd, dir, pickPort));
    etcd = etcdStarted.proc;
    const etcdUrl = etcdStarted.url;
    let port = 0;
    const launch = async (): Promise<void> => {
      apiserver = await startApiServer({ binary: bins.kubeApiserver, dir, certs, etcdUrl, port });
    };
    await withPortRetry('start-kube-apiserver', async () => {
      port = await pickPort();
      await launch();
    });
    const server = `https://127.0.0.1:${port}`;
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, kubeconfigYaml(server, certs));
    const stop = async (): Promise<void> => {
      await apiserver?.stop();
      await etcd?.stop();
      rmSync(dir, { recursive: true, force: true });
    };
    return {
      kubeconfig,
      server,
      stop,
      restartApiServer: async () => {
        await apiserver?.stop();
        await launch();
      },
      pids: () => [etcd, apiserver].filter((p) => p && !p.hasExited()).map((p) => (p as ServerProcess).pid),
    };
  } catch (err) {
    // Failed steps have copied their logs out already (stepFailed).
    await apiserver?.stop();
    await etcd?.stop();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

async function startEtcd(binary: string, dir: string, pickPort: () => Promise<number>): Promise<{ proc: ServerProcess; url: string }> {
  const clientPort = await pickPort();
  const peerPort = await pickPort();
  const url = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const dataDir = join(dir, `etcd-${clientPort}`);
  const proc = spawnServer({
    name: 'etcd',
    command: binary,
    args: [
      '--name=default', `--data-dir=${dataDir}`,
      `--listen-client-urls=${url}`, `--advertise-client-urls=${url}`,
      `--listen-peer-urls=${peer}`, `--initial-advertise-peer-urls=${peer}`, `--initial-cluster=default=${peer}`,
      // Test data is thrown away: skipping fsync makes every write much faster.
      '--unsafe-no-fsync',
    ],
    logPath: join(dir, 'etcd.log'),
  });
  const ready = (): Promise<boolean> => httpOk(`${url}/health`);
  await waitReady({ step: 'start-etcd', proc, timeoutMs: ETCD_READY_MS, ready });
  return { proc, url };
}

interface ApiServerOptions {
  binary: string;
  dir: string;
  certs: ControlPlaneCerts;
  etcdUrl: string;
  port: number;
}

async function startApiServer(o: ApiServerOptions): Promise<ServerProcess> {
  const c = o.certs;
  const proc = spawnServer({
    name: 'kube-apiserver',
    command: o.binary,
    // The flag set controller-runtime's envtest uses, with RBAC and client certificates.
    args: [
      `--etcd-servers=${o.etcdUrl}`,
      `--cert-dir=${c.dir}`,
      `--tls-cert-file=${c.serverCert}`, `--tls-private-key-file=${c.serverKey}`,
      `--client-ca-file=${c.caCert}`,
      `--secure-port=${o.port}`, '--bind-address=127.0.0.1',
      '--service-cluster-ip-range=10.0.0.0/24',
      '--allow-privileged=true',
      '--disable-admission-plugins=ServiceAccount',
      '--authorization-mode=Node,RBAC',
      `--service-account-issuer=https://127.0.0.1:${o.port}`,
      `--service-account-key-file=${c.serviceAccountPub}`,
      `--service-account-signing-key-file=${c.serviceAccountKey}`,
    ],
    logPath: join(o.dir, 'kube-apiserver.log'),
  });
  const ready = (): Promise<boolean> => readyz(o.port, c);
  await waitReady({ step: 'start-kube-apiserver', proc, timeoutMs: APISERVER_READY_MS, ready });
  return proc;
}

function httpOk(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpGet(url, { timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.once('error', () => resolve(false));
    req.once('timeout', () => req.destroy());
  });
}

function readyz(port: number, c: ControlPlaneCerts): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1', port, path: '/readyz', timeout: 2_000,
        ca: readFileSync(c.caCert), cert: readFileSync(c.clientCert), key: readFileSync(c.clientKey),
      },
      (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      },
    );
    req.once('error', () => resolve(false));
    req.once('timeout', () => req.destroy());
    req.end();
  });
}

function kubeconfigYaml(server: string, c: ControlPlaneCerts): string {
  const b64 = (path: string): string => readFileSync(path).toString('base64');
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'gw-test', cluster: { server, 'certificate-authority-data': b64(c.caCert) } }],
    users: [{ name: 'admin', user: { 'client-certificate-data': b64(c.clientCert), 'client-key-data': b64(c.clientKey) } }],
    contexts: [{ name: 'gw-test', context: { cluster: 'gw-test', user: 'admin' } }],
    'current-context': 'gw-test',
  });
}
