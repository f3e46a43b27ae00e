/**
 * The objects one operator keeps for itself, named after its release (the chart's fullname),
 * so that two releases on one cluster never share one: each its own webhook configuration
 * (cluster-scoped), leader Lease and webhook certificate Secret (in its namespace).
 * The default release name gives the names every install had before they were derived.
 */
export const DEFAULT_RELEASE_NAME = 'gw';

export interface ReleaseNames {
  webhookConfiguration: string;
  lease: string;
  webhookSecret: string;
}

export function releaseNames(release: string): ReleaseNames {
  return { webhookConfiguration: `${release}-sidecar-injector`, lease: `${release}-operator-leader`, webhookSecret: `${release}-webhook-tls` };
}
