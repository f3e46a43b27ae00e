import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { PAUSE_IMAGE } from '../../../scripts/images/test-bed.ts';

/**
 * The node's fixed addresses. They exist only inside the node's own network namespace, so
 * fixed values cannot clash with the machine or with another node.
 */
export const NODE_NET = {
  bridge: 'gwbr0',
  nodeIp: '10.88.0.1',
  podCidr: '10.88.0.0/24',
  serviceCidr: '10.0.0.0/24',
  apiServiceIp: '10.0.0.1',
  dnsServiceIp: '10.0.0.10',
  clusterDomain: 'cluster.local',
  apiServerPort: 6443,
} as const;

export const NODE_NAME = 'gwnode';

/** Where each piece of the node keeps its files, all under one root the sweep removes. */
export function nodePaths(root: string) {
  return {
    root,
    pki: join(root, 'pki'),
    logs: join(root, 'logs'),
    etcdData: join(root, 'etcd'),
    containerdConfig: join(root, 'containerd', 'config.toml'),
    containerdSocket: join(root, 'containerd', 'containerd.sock'),
    cniConfDir: join(root, 'cni', 'net.d'),
    kubeletConfig: join(root, 'kubelet', 'config.yaml'),
    kubeletRoot: join(root, 'kubelet', 'root'),
    adminKubeconfig: join(root, 'pki', 'admin.kubeconfig'),
    nodeKubeconfig: join(root, 'pki', 'node.kubeconfig'),
    volumes: join(root, 'volumes'),
  };
}
export type NodePaths = ReturnType<typeof nodePaths>;

export function containerdConfig(p: NodePaths): string {
  const base = join(p.root, 'containerd');
  return `version = 2
root = "${base}/root"
state = "${base}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "${p.containerdSocket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "${base}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # The machine lacks CAP_SYS_RESOURCE: without this runc fails every sandbox.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  # Pod network namespaces under the node's root, so the sweep finds them.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${base}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${p.cniConfDir}"
`;
}

export function cniConfig(p: NodePaths): string {
  return JSON.stringify({
    cniVersion: '1.0.0',
    name: 'gwnode',
    plugins: [
      {
        type: 'bridge',
        bridge: NODE_NET.bridge,
        isGateway: true,
        ipMasq: false,
        hairpinMode: true,
        ipam: {
          type: 'host-local',
          ranges: [[{ subnet: NODE_NET.podCidr, gateway: NODE_NET.nodeIp }]],
          dataDir: join(p.root, 'cni', 'ipam'),
          // Services are reached through the node, where kube-proxy rewrites them.
          routes: [{ dst: NODE_NET.serviceCidr }],
        },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  }, null, 1);
}

export function kubeletConfig(p: NodePaths, cgroupRoot: string): string {
  return stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    containerRuntimeEndpoint: `unix://${p.containerdSocket}`,
    cgroupDriver: 'cgroupfs',
    // Pods' cgroups under one root of the node's own, which the sweep removes.
    cgroupRoot: `/${cgroupRoot}`,
    failSwapOn: false,
    address: NODE_NET.nodeIp,
    port: 10250,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: 10248,
    tlsCertFile: join(p.pki, 'kubelet-serving.crt'),
    tlsPrivateKeyFile: join(p.pki, 'kubelet-serving.key'),
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: join(p.pki, 'ca.crt') } },
    authorization: { mode: 'Webhook' },
    clusterDNS: [NODE_NET.dnsServiceIp],
    clusterDomain: NODE_NET.clusterDomain,
    podLogsDir: join(p.root, 'pod-logs'),
    // kube-proxy owns the node's iptables; nothing of the machine's is touched.
    makeIPTablesUtilChains: false,
    // No upstream resolver: the node is offline by design.
    resolvConf: '',
    evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%', 'nodefs.inodesFree': '1%' },
    // The images are imported, not pulled: garbage collection must never remove them.
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    syncFrequency: '5s',
    fileCheckFrequency: '10s',
    nodeStatusReportFrequency: '10s',
    serializeImagePulls: false,
    maxPods: 60,
  });
}

export function kubeconfig(p: NodePaths, server: string, user: string): string {
  const b64 = (name: string): string => readFileSync(join(p.pki, name)).toString('base64');
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: NODE_NAME, cluster: { server, 'certificate-authority-data': b64('ca.crt') } }],
    users: [{ name: user, user: { 'client-certificate-data': b64(`${user}.crt`), 'client-key-data': b64(`${user}.key`) } }],
    contexts: [{ name: NODE_NAME, context: { cluster: NODE_NAME, user } }],
    'current-context': NODE_NAME,
  });
}
