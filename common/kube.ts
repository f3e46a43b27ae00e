import { KubeConfig } from '@kubernetes/client-node';

/**
 * Kubernetes client configuration for operator and sidecar: in a pod, the service
 * account; elsewhere `$KUBECONFIG` or ~/.kube/config (loadFromDefault covers all three).
 */
export function loadKubeConfig(kubeconfigPath?: string): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfigPath) kc.loadFromFile(kubeconfigPath);
  else kc.loadFromDefault();
  return kc;
}

export const GW_GROUP = 'gw.dev';
export const GW_VERSION = 'v1alpha1';
