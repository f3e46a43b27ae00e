import { ApiException, type ApiConstructor, type ApiType, createConfiguration, KubeConfig, ServerConfiguration, setHeaderMiddleware } from '@kubernetes/client-node';
import packageJson from '../package.json' with { type: 'json' };

/** The gw program a Kubernetes client works for. */
export type GwComponent = 'gw-operator' | 'gw-sidecar';

/**
 * A KubeConfig whose API clients send the gw program's name and version as their User-Agent
 * (`gw-operator/0.1.0`): the API server names a write's field manager (`managedFields`) after
 * what precedes its `/`, so `kubectl get -o yaml --show-managed-fields` says which fields gw
 * wrote (where the library's own agent read `kubernetes-client-javascript`), and an audit
 * entry's user agent says which release wrote them.
 */
class ComponentKubeConfig extends KubeConfig {
  readonly #userAgent: string;

  constructor(component: GwComponent) {
    super();
    this.#userAgent = `${component}/${packageJson.version}`;
  }

  override makeApiClient<T extends ApiType>(apiClientType: ApiConstructor<T>): T {
    const cluster = this.getCurrentCluster();
    if (!cluster) throw new Error('No active cluster!');
    return new apiClientType(
      createConfiguration({
        baseServer: new ServerConfiguration(cluster.server, {}),
        authMethods: { default: this },
        middleware: [setHeaderMiddleware('User-Agent', this.#userAgent)],
      }),
    );
  }
}

/** Where a pod's containers find their service-account token, CA and namespace (and client-node looks for them). */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
export const SERVICE_ACCOUNT_TOKEN = `${SERVICE_ACCOUNT_DIR}/token`;

/**
 * What client-node's loadFromDefault gives when it finds no kubeconfig and no service account:
 * http://localhost:8080, which every call then fails on far from the cause (in a pod, the
 * sidecar's own proxy port).
 */
const isNoKubeconfigFallback = (kc: KubeConfig): boolean =>
  kc.getCurrentContext() === 'loaded-context' && kc.getCurrentCluster()?.server === 'http://localhost:8080' && kc.getCurrentUser()?.name === 'user';

/**
 * Kubernetes client configuration for operator and sidecar: in a pod, the service
 * account; elsewhere `$KUBECONFIG` or ~/.kube/config (loadFromDefault covers all three).
 */
export function loadKubeConfig(component: GwComponent, kubeconfigPath?: string): KubeConfig {
  const kc = new ComponentKubeConfig(component);
  try {
    if (kubeconfigPath) kc.loadFromFile(kubeconfigPath);
    else kc.loadFromDefault();
  } catch (error) {
    throw new Error(`cannot read the kubeconfig: ${(error as Error).message}`, { cause: error });
  }
  if (!kubeconfigPath && isNoKubeconfigFallback(kc)) {
    throw new Error(
      process.env.KUBERNETES_SERVICE_HOST
        ? `no service-account token at ${SERVICE_ACCOUNT_TOKEN}: this container runs in a pod (KUBERNETES_SERVICE_HOST is set) but none is mounted in it, so it cannot reach the API server`
        : 'no kubeconfig: give --kubeconfig (KUBECONFIG), or put one at ~/.kube/config',
    );
  }
  return kc;
}

/**
 * A write refused because its namespace is being deleted: the API server's 403 names the cause
 * `NamespaceTerminating`. Retrying cannot help; the namespace's objects go with it.
 */
export const isNamespaceTerminating = (error: unknown): boolean =>
  error instanceof ApiException && error.code === 403 && String(error.body).includes('"NamespaceTerminating"');
