import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { REPO_ROOT } from './processes.ts';

type Kubectl = (args: string[], opts?: { input?: string; allowFail?: boolean }) => Promise<{ code: number; stdout: string; stderr: string }>;

export interface PodIdentities {
  /** Kubeconfig of the chart's operator ServiceAccount. */
  operatorKubeconfig: string;
  /** GW_RELEASE_NAME the chart gives the operator: the Lease its Role lets it write is named after it. */
  operatorReleaseName: string;
  /** Kubeconfig of the chart's admin gateway ServiceAccount (the gateway that serves the admin operations). */
  gatewayKubeconfig: string;
  /** Kubeconfig of the chart's ServiceAccount for injected sidecars in `namespace` (`sidecar.namespaces`). */
  sidecarKubeconfig: string;
  /** The Secret the chart puts in `namespace` for the injector's envFrom (GW_REDIS_URL), applied there. */
  sidecarEnvSecret: string;
  /** Removes the cluster-scoped RBAC objects (namespaced ones go with the namespace's resources). */
  cleanup(): Promise<void>;
}

export interface IdentityOptions {
  helmBin: string;
  /** Cluster-admin kubeconfig: server and CA are reused, the user is replaced by a token. */
  kubeconfig: string;
  namespace: string;
  /** The Redis the chart is pointed at (`redis.external.url`): it lands in the sidecar env Secret. */
  redisUrl: string;
  dir: string;
  kubectl: Kubectl;
}

const RBAC_KINDS = new Set(['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);
const COMPONENT = 'app.kubernetes.io/component';

interface Manifest {
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec?: { template: { spec: { containers: Array<{ env?: Array<{ name: string; value?: string }> }> } } };
}

/** The rendered objects a namespace of the release needs for its processes' identities. */
const applied = (m: Manifest): boolean => RBAC_KINDS.has(m.kind) || (m.kind === 'Secret' && m.metadata.labels?.[COMPONENT] === 'sidecar');

function helmTemplate(helmBin: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(helmBin, args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? resolve(stdout) : reject(new Error(`helm ${args.join(' ')} exited with ${code}: ${stderr.trim()}`))));
  });
}

function tokenKubeconfig(adminKubeconfig: string, token: string, path: string): string {
  const config = parse(readFileSync(adminKubeconfig, 'utf8')) as { users: { name: string; user: Record<string, string> }[] };
  config.users = config.users.map((u) => ({ name: u.name, user: { token } }));
  writeFileSync(path, stringify(config), { mode: 0o600 });
  return path;
}

/**
 * The identities the chart gives the operator, the admin gateway and injected sidecars, as
 * a pod would run with them: the chart's own ServiceAccounts and RBAC (rendered by `helm
 * template` for a release watching only `namespace`, with `namespace` as its one sidecar
 * namespace and `redisUrl` as its external Redis), and a token of each ServiceAccount.
 * Running the processes with these proves the chart's least-privilege roles are enough
 * for what they do.
 */
export async function chartIdentities(o: IdentityOptions): Promise<PodIdentities> {
  const release = `e2e-${randomBytes(3).toString('hex')}`;
  const render = async (releaseNamespace: string, values: string[]): Promise<Manifest[]> => {
    const rendered = await helmTemplate(o.helmBin, [
      'template', release, join(REPO_ROOT, 'charts', 'gw'),
      '--namespace', releaseNamespace,
      '--set', `watchNamespaces={${o.namespace}}`,
      '--set', 'redis.enabled=false',
      '--set-string', `redis.external.url=${o.redisUrl}`,
      ...values,
    ]);
    return parseAllDocuments(rendered)
      .map((doc) => doc.toJS() as Manifest | null)
      .filter((m): m is Manifest => m !== null);
  };
  // The chart refuses its own namespace as a sidecar namespace (the webhook never injects
  // there): the sidecar's objects come from the same release rendered in another namespace,
  // of which only they are applied.
  const isSidecar = (m: Manifest): boolean => m.metadata.labels?.[COMPONENT] === 'sidecar';
  const own = await render(o.namespace, []);
  const objects = [
    ...own.filter((m) => applied(m) && !isSidecar(m)),
    ...(await render(`${release}-system`, ['--set', `sidecar.namespaces={${o.namespace}}`, '--set', 'admin.enabled=false'])).filter((m) => applied(m) && isSidecar(m)),
  ];
  const operatorEnv = own.find((m) => m.kind === 'Deployment' && m.metadata.labels?.[COMPONENT] === 'operator')?.spec?.template.spec.containers[0]?.env ?? [];
  const operatorReleaseName = operatorEnv.find((e) => e.name === 'GW_RELEASE_NAME')?.value;
  if (operatorReleaseName === undefined) throw new Error('the chart gives the operator no GW_RELEASE_NAME');
  const cleanup = async (): Promise<void> => {
    await o.kubectl(['delete', 'clusterrole,clusterrolebinding', '-l', `app.kubernetes.io/instance=${release}`, '--ignore-not-found'], { allowFail: true });
  };
  await o.kubectl(['apply', '-n', o.namespace, '-f', '-'], { input: objects.map((m) => stringify(m)).join('---\n') });
  const named = (kind: string, component: string): string => {
    const found = objects.find((m) => m.kind === kind && m.metadata.labels?.[COMPONENT] === component);
    if (!found) throw new Error(`the chart renders no ${kind} for the ${component}`);
    return found.metadata.name;
  };
  const account = (component: string): string => named('ServiceAccount', component);
  const token = async (serviceAccount: string): Promise<string> =>
    (await o.kubectl(['create', 'token', serviceAccount, '-n', o.namespace, '--duration', '1h'])).stdout.trim();
  try {
    return {
      operatorKubeconfig: tokenKubeconfig(o.kubeconfig, await token(account('operator')), join(o.dir, 'operator.kubeconfig')),
      operatorReleaseName,
      gatewayKubeconfig: tokenKubeconfig(o.kubeconfig, await token(account('admin')), join(o.dir, 'gateway.kubeconfig')),
      sidecarKubeconfig: tokenKubeconfig(o.kubeconfig, await token(account('sidecar')), join(o.dir, 'sidecar.kubeconfig')),
      sidecarEnvSecret: named('Secret', 'sidecar'),
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
