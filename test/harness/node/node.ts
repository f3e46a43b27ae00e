import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CertIssuer, CLIENT_EXT, serverExt } from '../certs.ts';
import { HarnessStepError, stepFailed } from '../errors.ts';
import { ensureDebianPackages } from '../install-debian.ts';
import { serverDir, spawnServer, type ServerProcess } from '../procs.ts';
import { runTool, type ToolOptions, type ToolResult } from '../run-tool.ts';
import { waitReady } from '../wait-ready.ts';
import { corednsManifests } from './coredns.ts';
import { cniConfig, containerdConfig, kubeconfig, kubeletConfig, NODE_NAME, NODE_NET, nodePaths, type NodePaths } from './node-files.ts';

export interface NodeBins {
  etcd: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  kubelet: string;
  kubeProxy: string;
  kubectl: string;
  helm: string;
}

export interface NodeOptions {
  /** OCI image archives imported into containerd before the kubelet starts (pause, CoreDNS, …). */
  images: string[];
}

export interface NodeHandle {
  root: string;
  /** The network namespace that holds every address of the node. */
  netns: string;
  name: string;
  nodeIp: string;
  /** Cluster-admin kubeconfig; its server is reachable only inside `netns`. */
  kubeconfig: string;
  /** Folder for hostPath PersistentVolumes, removed with the node. */
  volumesDir: string;
  /** Runs a command inside the node's network namespace. */
  run(command: string, args: string[], opts?: ToolOptions): Promise<ToolResult>;
  kubectl(args: string[], opts?: ToolOptions): Promise<ToolResult>;
  /** The argv prefix that puts a command inside the node's network namespace. */
  nsenter: string[];
  /** Imports more OCI image archives into the node's containerd. */
  importImages(archives: string[]): Promise<void>;
  /** Seconds each start-up step took, in order. */
  timings: Array<[string, number]>;
  /** Stops kube-apiserver, starts it again with the same flags, and waits until it is ready. */
  restartApiServer(): Promise<void>;
  stop(): Promise<void>;
}

// Global sysctls the kubelet rewrites with no opt-out; saved before it starts, restored after.
const KUBELET_SYSCTLS = ['kernel.panic', 'kernel.panic_on_oops', 'vm.overcommit_memory', 'vm.panic_on_oom'];

const NODE_PACKAGES = {
  step: 'install-node-packages',
  packages: ['containerd', 'runc', 'containernetworking-plugins', 'iptables', 'conntrack', 'iproute2', 'util-linux'],
  provides: ['/usr/bin/containerd', '/usr/bin/ctr', '/usr/sbin/runc', '/usr/lib/cni/bridge', '/usr/lib/cni/host-local',
    '/usr/lib/cni/portmap', '/usr/sbin/iptables', '/usr/sbin/conntrack', '/usr/bin/nsenter', '/usr/sbin/ip'],
};

const SWEEP = join(import.meta.dirname, 'node-sweep.sh');

/**
 * A single-node cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
 * kubelet on containerd, kube-proxy, CoreDNS), every address of it inside a network
 * namespace of its own. Needs root. stop() — or node-sweep.sh, after a killed run — leaves
 * nothing of it behind.
 */
export async function startNode(bins: NodeBins, opts: NodeOptions): Promise<NodeHandle> {
  if (process.getuid?.() !== 0) {
    throw new HarnessStepError('start-node', '(none)', 'a node needs root (network namespaces, containerd, the kubelet)');
  }
  await ensureDebianPackages(NODE_PACKAGES);
  const id = randomBytes(4).toString('hex');
  const root = serverDir('node');
  const p = nodePaths(root);
  const netns = `gwnode-${id}`;
  const cgroup = `gwnode-${id}`;
  // Written first: from here on, the sweep knows what to remove.
  writeFileSync(join(root, 'node.env'), `NETNS=${netns}\nCGROUP=${cgroup}\n`);
  for (const dir of [p.pki, p.logs, p.cniConfDir, join(root, 'containerd'), join(root, 'kubelet'), p.volumes]) mkdirSync(dir, { recursive: true });

  const timings: Array<[string, number]> = [];
  const started = Date.now();
  let lap = started;
  const mark = (step: string): void => {
    const now = Date.now();
    timings.push([step, (now - lap) / 1000]);
    lap = now;
  };
  const netnsArgs = [`--net=/run/netns/${netns}`, '--'];
  const nsenter = ['nsenter', ...netnsArgs];
  const run = (command: string, args: string[], o: ToolOptions = {}): Promise<ToolResult> =>
    runTool('nsenter', [...netnsArgs, command, ...args], { timeoutMs: 60_000, ...o });
  const kubectl = (args: string[], o: ToolOptions = {}): Promise<ToolResult> => run(bins.kubectl, ['--kubeconfig', p.adminKubeconfig, ...args], o);
  const procs: ServerProcess[] = [];
  const spawnIn = (name: string, binary: string, args: string[]): ServerProcess => {
    const proc = spawnServer({ name, command: 'nsenter', args: [...netnsArgs, binary, ...args], execs: binary, logPath: join(p.logs, `${name}.log`) });
    procs.push(proc);
    return proc;
  };
  const importImages = async (archives: string[]): Promise<void> => {
    for (const archive of archives) {
      await runTool('ctr', ['--address', p.containerdSocket, '-n', 'k8s.io', 'images', 'import', '--no-unpack', archive], { timeoutMs: 120_000 });
    }
  };
  const stop = async (): Promise<void> => {
    // Node agents first, so nothing restarts what the sweep removes; the API server last,
    // so they can still report while they stop.
    for (const name of ['kube-proxy', 'kubelet', 'kube-scheduler', 'kube-controller-manager']) {
      await procs.find((proc) => proc.name === name)?.stop(5_000);
    }
    await runTool('bash', [SWEEP, root], { timeoutMs: 120_000, allowFail: true });
    for (const proc of procs.reverse()) await proc.stop(5_000);
  };

  try {
    saveSysctls(root);
    await createNetwork(netns, cgroup);
    mark('network namespace');
    await writePki(p);
    writeFileSync(p.containerdConfig, containerdConfig(p));
    writeFileSync(join(p.cniConfDir, '10-gwnode.conflist'), cniConfig(p));
    writeFileSync(p.kubeletConfig, kubeletConfig(p, cgroup));
    const server = `https://${NODE_NET.nodeIp}:${NODE_NET.apiServerPort}`;
    writeFileSync(p.adminKubeconfig, kubeconfig(p, server, 'admin'));
    writeFileSync(p.nodeKubeconfig, kubeconfig(p, server, 'node'));
    mark('certificates and configs');

    const containerd = spawnIn('containerd', '/usr/bin/containerd', ['--config', p.containerdConfig]);
    const etcd = spawnIn('etcd', bins.etcd, [
      '--name=default', `--data-dir=${p.etcdData}`,
      '--listen-client-urls=http://127.0.0.1:2379', '--advertise-client-urls=http://127.0.0.1:2379',
      '--listen-peer-urls=http://127.0.0.1:2380', '--initial-advertise-peer-urls=http://127.0.0.1:2380',
      '--initial-cluster=default=http://127.0.0.1:2380', '--unsafe-no-fsync',
    ]);
    await waitReady({ step: 'start-node-containerd', proc: containerd, timeoutMs: 30_000, ready: async () =>
      (await runTool('ctr', ['--address', p.containerdSocket, 'version'], { timeoutMs: 5_000, allowFail: true })).code === 0 });
    mark('containerd');
    await importImages(opts.images);
    mark(`${opts.images.length} images imported`);
    await waitReady({ step: 'start-node-etcd', proc: etcd, timeoutMs: 30_000, ready: () => httpOkInNetns(run, '127.0.0.1', 2379, '/health') });
    mark('etcd');

    const pki = (name: string): string => join(p.pki, name);
    const apiserverArgs = [
      '--etcd-servers=http://127.0.0.1:2379',
      `--cert-dir=${p.pki}`, `--tls-cert-file=${pki('apiserver.crt')}`, `--tls-private-key-file=${pki('apiserver.key')}`,
      `--client-ca-file=${pki('ca.crt')}`,
      `--secure-port=${NODE_NET.apiServerPort}`, '--bind-address=0.0.0.0', `--advertise-address=${NODE_NET.nodeIp}`,
      `--service-cluster-ip-range=${NODE_NET.serviceCidr}`,
      '--allow-privileged=true',
      '--authorization-mode=Node,RBAC', '--enable-admission-plugins=NodeRestriction',
      '--service-account-issuer=https://kubernetes.default.svc', `--service-account-key-file=${pki('sa.pub')}`,
      `--service-account-signing-key-file=${pki('sa.key')}`,
      `--kubelet-client-certificate=${pki('apiserver-kubelet-client.crt')}`, `--kubelet-client-key=${pki('apiserver-kubelet-client.key')}`,
      `--kubelet-certificate-authority=${pki('ca.crt')}`, '--kubelet-preferred-address-types=InternalIP',
    ];
    let apiserver = spawnIn('kube-apiserver', bins.kubeApiserver, apiserverArgs);
    const apiserverReady = (proc: ServerProcess): Promise<void> => waitReady({ step: 'start-node-kube-apiserver', proc, timeoutMs: 120_000,
      ready: async () => (await kubectl(['get', '--raw', '/readyz'], { allowFail: true, timeoutMs: 5_000 })).code === 0 });
    await apiserverReady(apiserver);
    mark('kube-apiserver');
    const restartApiServer = async (): Promise<void> => {
      await apiserver.stop(10_000);
      procs.splice(procs.indexOf(apiserver), 1);
      apiserver = spawnIn('kube-apiserver', bins.kubeApiserver, apiserverArgs);
      await apiserverReady(apiserver);
    };

    spawnIn('kube-controller-manager', bins.kubeControllerManager, [
      `--kubeconfig=${p.adminKubeconfig}`, '--leader-elect=false', '--secure-port=0',
      `--service-account-private-key-file=${pki('sa.key')}`, `--root-ca-file=${pki('ca.crt')}`,
      `--cluster-signing-cert-file=${pki('ca.crt')}`, `--cluster-signing-key-file=${pki('ca.key')}`,
      '--use-service-account-credentials=true',
    ]);
    spawnIn('kube-scheduler', bins.kubeScheduler, [`--kubeconfig=${p.adminKubeconfig}`, '--leader-elect=false', '--secure-port=0']);
    spawnIn('kubelet', bins.kubelet, [
      `--config=${p.kubeletConfig}`, `--kubeconfig=${p.nodeKubeconfig}`, `--root-dir=${p.kubeletRoot}`,
      `--hostname-override=${NODE_NAME}`, `--node-ip=${NODE_NET.nodeIp}`,
    ]);
    spawnIn('kube-proxy', bins.kubeProxy, [
      `--kubeconfig=${p.adminKubeconfig}`, `--hostname-override=${NODE_NAME}`, '--proxy-mode=iptables',
      `--cluster-cidr=${NODE_NET.podCidr}`, `--nodeport-addresses=${NODE_NET.nodeIp}/32`, '--iptables-localhost-nodeports=false',
      // The conntrack table is the machine's: leave its limits alone.
      '--conntrack-max-per-core=0', '--conntrack-tcp-timeout-established=0', '--conntrack-tcp-timeout-close-wait=0',
      '--metrics-bind-address=127.0.0.1:10249', '--healthz-bind-address=127.0.0.1:10256',
    ]);
    await waitFor('node-ready', 60_000, p.logs, async () =>
      (await kubectl(['wait', '--for=condition=Ready', `node/${NODE_NAME}`, '--timeout=2s'], { allowFail: true })).code === 0);
    mark('node Ready');

    await kubectl(['apply', '-f', '-'], { input: corednsManifests() });
    await waitFor('cluster-dns', 60_000, p.logs, async () =>
      (await kubectl(['-n', 'kube-system', 'rollout', 'status', 'deployment/coredns', '--timeout=2s'], { allowFail: true })).code === 0);
    await waitFor('default-service-account', 30_000, p.logs, async () =>
      (await kubectl(['get', 'serviceaccount', 'default', '-n', 'default'], { allowFail: true })).code === 0);
    mark('cluster DNS');
    timings.push(['total', (Date.now() - started) / 1000]);
    return {
      root, netns, name: NODE_NAME, nodeIp: NODE_NET.nodeIp, kubeconfig: p.adminKubeconfig, volumesDir: p.volumes,
      run, kubectl, nsenter, importImages, timings, restartApiServer, stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

function saveSysctls(root: string): void {
  const lines = KUBELET_SYSCTLS.map((key) => `${key}=${readFileSync(`/proc/sys/${key.replaceAll('.', '/')}`, 'utf8').trim()}`);
  writeFileSync(join(root, 'sysctl.saved'), `${lines.join('\n')}\n`);
}

async function createNetwork(netns: string, cgroup: string): Promise<void> {
  const ip = (args: string[]): Promise<ToolResult> => runTool('ip', args, { timeoutMs: 10_000 });
  await ip(['netns', 'add', netns]);
  await ip(['-n', netns, 'link', 'set', 'lo', 'up']);
  // The pod bridge carries the node IP; the CNI bridge plugin finds it and reuses it.
  await ip(['-n', netns, 'link', 'add', NODE_NET.bridge, 'type', 'bridge']);
  await ip(['-n', netns, 'addr', 'add', `${NODE_NET.nodeIp}/24`, 'dev', NODE_NET.bridge]);
  await ip(['-n', netns, 'link', 'set', NODE_NET.bridge, 'up']);
  // Node processes (the API server calling a webhook Service) need a route to the Service
  // range; kube-proxy's rules then rewrite it to a pod. Without one the kernel answers
  // "network is unreachable" before the rules are reached.
  await ip(['-n', netns, 'route', 'add', NODE_NET.serviceCidr, 'dev', NODE_NET.bridge, 'src', NODE_NET.nodeIp]);
  createCgroupRoot(cgroup);
}

/** The kubelet expects its cgroup root in every hierarchy; cpuset needs its cpus and mems set. */
function createCgroupRoot(cgroup: string): void {
  for (const hierarchy of readdirSync('/sys/fs/cgroup')) {
    const dir = join('/sys/fs/cgroup', hierarchy, cgroup);
    try {
      mkdirSync(dir);
    } catch {
      continue;
    }
    if (hierarchy === 'cpuset') {
      for (const file of ['cpuset.cpus', 'cpuset.mems']) {
        writeFileSync(join(dir, file), readFileSync(join('/sys/fs/cgroup/cpuset', file), 'utf8'));
      }
    }
  }
}

async function writePki(p: NodePaths): Promise<void> {
  const certs = new CertIssuer(p.pki);
  await certs.createCa('gwnode-ca');
  await certs.issue('apiserver', '/CN=kube-apiserver', serverExt([
    '127.0.0.1', 'localhost', NODE_NET.nodeIp, NODE_NET.apiServiceIp,
    'kubernetes', 'kubernetes.default', 'kubernetes.default.svc', `kubernetes.default.svc.${NODE_NET.clusterDomain}`,
  ]));
  await certs.issue('admin', '/O=system:masters/CN=admin', CLIENT_EXT);
  await certs.issue('apiserver-kubelet-client', '/O=system:masters/CN=kube-apiserver-kubelet-client', CLIENT_EXT);
  await certs.issue('node', `/O=system:nodes/CN=system:node:${NODE_NAME}`, CLIENT_EXT);
  await certs.issue('kubelet-serving', `/CN=${NODE_NAME}`, serverExt([NODE_NET.nodeIp, NODE_NAME]));
  await certs.serviceAccountKeys();
  chmodSync(p.pki, 0o700);
}

/** A plain-HTTP GET inside the namespace, with bash's /dev/tcp: no client tool needed. */
async function httpOkInNetns(run: NodeHandle['run'], host: string, port: number, path: string): Promise<boolean> {
  const script = `exec 3<>/dev/tcp/${host}/${port} && printf 'GET ${path} HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3`;
  const r = await run('bash', ['-c', script], { allowFail: true, timeoutMs: 5_000 });
  return r.code === 0 && / 200 /.test(r.stdout);
}

async function waitFor(step: string, timeoutMs: number, logs: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw stepFailed(`start-node-${step}`, logs, `not done after ${timeoutMs} ms`);
    await sleep(250);
  }
}
