import { request } from 'node:https';
import { existsSync } from 'node:fs';
import { request as plainRequest } from 'node:http';
import { delimiter } from 'node:path';
import { AppsV1Api, CoreV1Api, CustomObjectsApi, EventsV1Api, KubeConfig, type V1Deployment } from '@kubernetes/client-node';
import { group, kinds, version, type KindName } from '../crds/kinds.ts';

/** What the plugin was told about the cluster: kubectl's own flags. */
export interface ClusterFlags {
  kubeconfig?: string | undefined;
  /** KUBECONFIG: files separated by the platform's path delimiter. */
  kubeconfigList?: string | undefined;
  context?: string | undefined;
  namespace?: string | undefined;
  /** Where gw is installed; unset: its admin gateway is looked for in every namespace. */
  adminNamespace?: string | undefined;
}

/** A gw resource as the plugin reads it: just what it prints. */
export interface GwResource {
  kind: KindName;
  metadata: { name: string; namespace: string; creationTimestamp?: string };
  spec?: Record<string, unknown>;
  status?: { key_hash?: string; conditions?: { type: string; status: string; reason?: string; message?: string; lastTransitionTime?: string }[] };
}

/** The chart's admin gateway: its Service (the address) and where its admin secret lives. */
const ADMIN_SELECTOR = 'app.kubernetes.io/part-of=gw,app.kubernetes.io/component=admin';

export class PluginError extends Error {}

/**
 * An API server's refusal as kubectl words it (`Error from server (Forbidden): …`), from the
 * Status it answered; a 401 comes without one, as client-node keeps no body for it.
 */
export function serverRefusal(code: number, body: unknown): string {
  const status = statusOf(body);
  const reason = status?.reason || (code === 401 ? 'Unauthorized' : `HTTP ${code}`);
  const message = status?.message || (code === 401 ? 'you must be logged in to the server' : 'no message');
  return `from the API server (${reason}): ${message}`;
}

/** A Kubernetes Status (`kind: Status`) in an answer's body, as client-node keeps it (text) or parsed. */
function statusOf(body: unknown): { reason?: string; message?: string } | null {
  let parsed = body;
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body);
    } catch {
      return null;
    }
  }
  return typeof parsed === 'object' && parsed !== null && (parsed as { kind?: unknown }).kind === 'Status' ? (parsed as { reason?: string; message?: string }) : null;
}

/**
 * What client-node's loadFromDefault gives when it finds no kubeconfig (nor a pod's service
 * account): http://localhost:8080, on which every call would fail far from the cause.
 */
const foundNoKubeconfig = (kc: KubeConfig): boolean =>
  kc.getCurrentContext() === 'loaded-context' && kc.getCurrentCluster()?.server === 'http://localhost:8080' && kc.getCurrentUser()?.name === 'user';

/** The cluster as kubectl would reach it with the same flags. */
export class Cluster {
  readonly kc: KubeConfig;
  readonly namespace: string;
  readonly #adminNamespace: string | undefined;

  constructor(flags: ClusterFlags) {
    this.#adminNamespace = flags.adminNamespace;
    this.kc = new KubeConfig();
    if (flags.kubeconfig) this.kc.loadFromFile(flags.kubeconfig);
    else if (flags.kubeconfigList) loadKubeconfigList(this.kc, flags.kubeconfigList);
    else this.kc.loadFromDefault();
    if (!flags.kubeconfig && !flags.kubeconfigList && foundNoKubeconfig(this.kc)) {
      throw new PluginError('no kubeconfig: set KUBECONFIG or --kubeconfig, or put one at ~/.kube/config');
    }
    if (flags.context) {
      if (!this.kc.getContextObject(flags.context)) throw new PluginError(`context "${flags.context}" does not exist`);
      this.kc.setCurrentContext(flags.context);
    }
    // An empty namespace is no namespace given, as kubectl takes `-n ""`.
    this.namespace = flags.namespace || this.kc.getContextObject(this.kc.getCurrentContext())?.namespace || 'default';
  }

  async getResource(kind: KindName, namespace: string, name: string): Promise<GwResource | null> {
    try {
      const found = (await this.kc.makeApiClient(CustomObjectsApi).getNamespacedCustomObject({ group, version, namespace, plural: kinds[kind].plural, name })) as GwResource;
      return { ...found, kind };
    } catch (error) {
      if ((error as { code?: number }).code === 404) return null;
      throw error;
    }
  }

  /** Every object of a kind, in one namespace or (null) all of them. */
  async listResources(kind: KindName, namespace: string | null): Promise<GwResource[]> {
    const api = this.kc.makeApiClient(CustomObjectsApi);
    const plural = kinds[kind].plural;
    const list = (namespace === null
      ? await api.listClusterCustomObject({ group, version, plural })
      : await api.listNamespacedCustomObject({ group, version, namespace, plural })) as { items: GwResource[] };
    return list.items.map((item) => ({ ...item, kind }));
  }

  events(namespace: string | null) {
    const api = this.kc.makeApiClient(EventsV1Api);
    return namespace === null ? api.listEventForAllNamespaces() : api.listNamespacedEvent({ namespace });
  }

  /** The admin secret of the chart's admin gateway, from the Secret its Deployment reads it from. */
  async adminSecret(): Promise<string> {
    const deployment = await this.#adminDeployment();
    const ref = deployment.spec?.template.spec?.containers.flatMap((c) => c.env ?? []).find((e) => e.name === 'GW_ADMIN_SECRET')?.valueFrom?.secretKeyRef;
    if (!ref?.name) throw new PluginError(`the admin gateway ${deployment.metadata?.name} reads no GW_ADMIN_SECRET from a Secret; give it with GW_ADMIN_SECRET`);
    const namespace = deployment.metadata?.namespace ?? 'default';
    const secret = await this.kc.makeApiClient(CoreV1Api).readNamespacedSecret({ namespace, name: ref.name });
    const value = secret.data?.[ref.key];
    if (!value) throw new PluginError(`Secret ${namespace}/${ref.name} has no ${ref.key}`);
    return Buffer.from(value, 'base64').toString('utf8');
  }

  /**
   * GET on the admin gateway: at `adminUrl` when given (a port-forward, an Ingress), else
   * through the API server's proxy to the chart's admin Service, with kubectl's credentials.
   */
  async adminGet(path: string, secret: string, adminUrl: string | undefined): Promise<{ status: number; body: string }> {
    const headers = { 'x-gw-authorization': secret, accept: 'application/json' };
    // Under the URL's own path, such as an Ingress' /gw-admin/: `new URL(path, adminUrl)` would drop it.
    if (adminUrl) return get(new URL(`${adminUrl.replace(/\/+$/, '')}${path}`), { headers });
    const service = await this.#adminService();
    const url = new URL(`${this.kc.getCurrentCluster()?.server ?? ''}/api/v1/namespaces/${service.namespace}/services/${service.scheme}:${service.name}:${service.port}/proxy${path}`);
    const options: { headers: Record<string, string> } = { headers };
    await this.kc.applyToHTTPSOptions(options);
    const res = await get(url, { ...options, headers: { ...options.headers, ...headers } });
    // The proxy's own refusals (no services/proxy right, no endpoint) are a Status; the gateway's answers never are.
    if (res.status !== 200 && statusOf(res.body)) throw new PluginError(serverRefusal(res.status, res.body));
    return res;
  }

  async #adminDeployment(): Promise<V1Deployment> {
    const apps = this.kc.makeApiClient(AppsV1Api);
    const found = await this.#theAdmin('gateways (Deployments)', (namespace) =>
      namespace ? apps.listNamespacedDeployment({ namespace, labelSelector: ADMIN_SELECTOR }) : apps.listDeploymentForAllNamespaces({ labelSelector: ADMIN_SELECTOR }),
    );
    // Only the admin secret is read from it: --admin-url alone does not say the secret.
    if (!found) throw new PluginError('no gw admin gateway found (a Deployment labelled app.kubernetes.io/component=admin) to read the admin secret from; give it with GW_ADMIN_SECRET');
    return found;
  }

  async #adminService(): Promise<{ namespace: string; name: string; port: number; scheme: string }> {
    const core = this.kc.makeApiClient(CoreV1Api);
    const service = await this.#theAdmin('Services', (namespace) =>
      namespace ? core.listNamespacedService({ namespace, labelSelector: ADMIN_SELECTOR }) : core.listServiceForAllNamespaces({ labelSelector: ADMIN_SELECTOR }),
    );
    const port = service?.spec?.ports?.[0];
    if (!service?.metadata?.name || !port) throw new PluginError('no gw admin Service found; give --admin-url');
    return { namespace: service.metadata.namespace ?? 'default', name: service.metadata.name, port: port.port, scheme: port.name?.startsWith('https') ? 'https' : 'http' };
  }

  /** The one object of the chart's admin gateway that `list` finds, in --admin-namespace or anywhere; `what`: their plural. */
  async #theAdmin<T>(what: string, list: (namespace: string | undefined) => Promise<{ items: T[] }>): Promise<T | undefined> {
    const { items } = await list(this.#adminNamespace);
    if (items.length > 1) throw new PluginError(`${items.length} gw admin ${what} found; choose one with --admin-namespace`);
    return items[0];
  }
}

/**
 * KUBECONFIG as kubectl merges it: every file of the list that exists, the first file to name a
 * cluster, user or context, or to set the current context, winning. client-node's
 * loadFromDefault reads a missing file as an error and a name given twice as a duplicate.
 */
function loadKubeconfigList(kc: KubeConfig, list: string): void {
  const files = list.split(delimiter).filter((file) => file !== '' && existsSync(file));
  if (files.length === 0) throw new PluginError(`none of the KUBECONFIG files exists: ${list}`);
  const configs = files.map((file) => {
    const config = new KubeConfig();
    config.loadFromFile(file);
    return config;
  });
  const firstOfEachName = <T extends { name: string }>(items: T[]): T[] => items.filter((item, i) => items.findIndex((other) => other.name === item.name) === i);
  kc.loadFromOptions({
    clusters: firstOfEachName(configs.flatMap((config) => config.clusters)),
    users: firstOfEachName(configs.flatMap((config) => config.users)),
    contexts: firstOfEachName(configs.flatMap((config) => config.contexts)),
    currentContext: configs.map((config) => config.currentContext).find(Boolean) ?? '',
  });
}

function get(url: URL, options: Record<string, unknown>): Promise<{ status: number; body: string }> {
  const send = url.protocol === 'https:' ? request : plainRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, { ...options, method: 'GET', timeout: 15_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new PluginError(`${url.origin} did not answer within 15 s`)));
    req.on('error', reject);
    req.end();
  });
}
