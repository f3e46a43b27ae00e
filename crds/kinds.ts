/**
 * The five custom resource kinds of gw.dev/v1alpha1 (docs/architecture.md#folders): what the operator, the
 * sidecar and the generator need to address them through the Kubernetes API.
 */
export const group = 'gw.dev';
export const version = 'v1alpha1';
export const apiVersion = `${group}/${version}`;
/** `kubectl get gw` lists every kind of this category. */
export const category = 'gw';

export interface KindInfo {
  group: typeof group;
  version: typeof version;
  kind: string;
  listKind: string;
  plural: string;
  singular: string;
  shortName: string;
}

function kindInfo(kind: string, plural: string, shortName: string): KindInfo {
  return { group, version, kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase(), shortName };
}

export const kinds = {
  ApiDefinition: kindInfo('ApiDefinition', 'apidefinitions', 'gwapi'),
  Policy: kindInfo('Policy', 'policies', 'gwpol'),
  Key: kindInfo('Key', 'keys', 'gwkey'),
  Category: kindInfo('Category', 'categories', 'gwcat'),
  PortalProduct: kindInfo('PortalProduct', 'portalproducts', 'gwprod'),
} as const satisfies Record<string, KindInfo>;

export type KindName = keyof typeof kinds;

export const kindNames = Object.keys(kinds) as KindName[];

/** `<plural>.gw.dev`: the CRD's name, and its generated file's base name. */
export const crdName = (info: KindInfo): string => `${info.plural}.${info.group}`;
