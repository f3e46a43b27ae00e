import { stringify } from 'yaml';
import { NODE_NET } from './node-files.ts';

export const COREDNS_IMAGE = 'localhost/coredns:test-bed';

// A non-root process may not bind port 53 (Kubernetes grants no ambient capabilities): the
// Service maps 53 to this port.
const DNS_PORT = 1053;

/**
 * The cluster DNS every real cluster has, so Service names (`gw-redis.gw-system.svc`)
 * resolve in pods. Names outside the cluster get NXDOMAIN at once: the node is offline,
 * and nothing may be forwarded out of it.
 */
export function corednsManifests(): string {
  const labels = { 'k8s-app': 'kube-dns' };
  // Two server blocks: CoreDNS orders plugins by its own list, not by the Corefile, so a
  // catch-all template inside the cluster block would answer before `kubernetes` does.
  const corefile = [
    `${NODE_NET.clusterDomain}:${DNS_PORT} in-addr.arpa:${DNS_PORT} ip6.arpa:${DNS_PORT} {`,
    '    errors',
    '    health :8080',
    '    ready :8181',
    `    kubernetes ${NODE_NET.clusterDomain} in-addr.arpa ip6.arpa {`,
    '        pods insecure',
    '        ttl 5',
    '    }',
    '    cache 5',
    '    loop',
    '}',
    `.:${DNS_PORT} {`,
    '    errors',
    '    template ANY ANY {',
    '        rcode NXDOMAIN',
    '    }',
    '}',
    '',
  ].join('\n');
  const objects = [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'coredns', namespace: 'kube-system' } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns' },
      rules: [
        { apiGroups: [''], resources: ['endpoints', 'services', 'pods', 'namespaces'], verbs: ['list', 'watch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: 'kube-system' }],
    },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'coredns', namespace: 'kube-system' }, data: { Corefile: corefile } },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'coredns', namespace: 'kube-system', labels },
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: 'coredns',
            priorityClassName: 'system-cluster-critical',
            dnsPolicy: 'Default',
            terminationGracePeriodSeconds: 1,
            securityContext: { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: { type: 'RuntimeDefault' } },
            containers: [{
              name: 'coredns',
              image: COREDNS_IMAGE,
              imagePullPolicy: 'Never',
              args: ['-conf', '/etc/coredns/Corefile'],
              ports: [
                { name: 'dns', containerPort: DNS_PORT, protocol: 'UDP' },
                { name: 'dns-tcp', containerPort: DNS_PORT, protocol: 'TCP' },
              ],
              securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
              readinessProbe: { httpGet: { path: '/ready', port: 8181 }, periodSeconds: 2 },
              livenessProbe: { httpGet: { path: '/health', port: 8080 }, periodSeconds: 10 },
              volumeMounts: [{ name: 'config', mountPath: '/etc/coredns', readOnly: true }],
            }],
            volumes: [{ name: 'config', configMap: { name: 'coredns' } }],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'kube-dns', namespace: 'kube-system', labels },
      spec: {
        clusterIP: NODE_NET.dnsServiceIp,
        selector: labels,
        ports: [
          { name: 'dns', port: 53, protocol: 'UDP', targetPort: DNS_PORT },
          { name: 'dns-tcp', port: 53, protocol: 'TCP', targetPort: DNS_PORT },
        ],
      },
    },
  ];
  return objects.map((o) => stringify(o)).join('---\n');
}
