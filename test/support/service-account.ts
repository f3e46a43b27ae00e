import { stringify } from 'yaml';
import { kubectl } from '../harness/index.ts';

export interface RoleRule {
  apiGroups: string[];
  resources: string[];
  /** Only these objects (RBAC's resourceNames); every one when left out. */
  resourceNames?: string[];
  verbs: string[];
}

/** Manifest (YAML) of a ServiceAccount bound to a Role of the same name holding `rules`. */
export function serviceAccountWithRole(namespace: string, name: string, rules: RoleRule[]): string {
  const metadata = { name, namespace };
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata, rules },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace }],
    },
  ]
    .map((doc) => stringify(doc))
    .join('---\n');
}

/** Create that account (idempotent) and return a bearer token of it the API server will accept for ten minutes. */
export async function serviceAccountToken(namespace: string, name: string, rules: RoleRule[]): Promise<string> {
  await kubectl(['apply', '-f', '-'], { input: serviceAccountWithRole(namespace, name, rules) });
  return (await kubectl(['create', 'token', name, '-n', namespace, '--duration', '10m'])).stdout.trim();
}
