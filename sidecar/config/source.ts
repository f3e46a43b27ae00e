import type { CompiledAccessRight, CompiledConfig, ResourceRef } from '../../crds/compiled.ts';

/**
 * Where a sidecar's compiled config comes from: the operator's ConfigMaps (Kubernetes) or
 * a folder of resource YAML. A source publishes whole configs; the runtime applies them.
 */
export interface ConfigSource {
  readonly name: string;
  /** Begin loading; `publish` is called with every new whole config. */
  start(publish: (config: CompiledConfig) => void): Promise<void>;
  /** Re-read everything now (docs/behaviour.md#api-states reload) and publish the result. */
  reload(): Promise<void>;
  stop(): Promise<void>;
  /** Configs refused since their last good version (each API keeps serving that one), and a source that has stopped receiving its config. */
  problems(): ConfigProblem[];
  /** Standalone: the file of the config folder a resource of the published config was loaded from. */
  fileOf?(resource: ResourceRef): string | undefined;
}

export interface ConfigProblem {
  /** What was refused: `api <api_id>` (a compiled ConfigMap) or `<Kind> <namespace>/<name>` (a resource). */
  subject: string;
  reason: string;
  /** Standalone: the file of the config folder it was found in, where the subject is in one. */
  file?: string;
}

/**
 * Per-API configs (one ConfigMap each) merged into the one config a sidecar runs; the APIs
 * in the parts' order, the settings of the first current part. A policy is in the part of every API it grants. Its copy from a
 * `current` part (one the operator keeps up to date) wins over a copy from a part served on
 * after its API was deleted, which nothing updates any more (docs/behaviour.md#api-states).
 * And each API's own part says whether a policy grants it: a current copy compiled after the
 * API was deleted lacks the grant, while the API is still served until the reload.
 */
export function mergeConfigs(
  parts: readonly CompiledConfig[],
  fallbackSettings: CompiledConfig['settings'],
  isCurrent: (part: CompiledConfig) => boolean = () => true,
): CompiledConfig {
  const merged: CompiledConfig = {
    version: 1,
    // A part served on after its API was deleted keeps the settings it was compiled with.
    settings: (parts.find(isCurrent) ?? parts[0])?.settings ?? fallbackSettings,
    apis: [],
    policies: {},
  };
  const current: CompiledConfig[] = [];
  for (const part of parts) {
    merged.apis.push(...part.apis);
    if (isCurrent(part)) current.push(part);
    else Object.assign(merged.policies, part.policies);
  }
  for (const part of current) Object.assign(merged.policies, part.policies);
  const missing = new Map<string, Record<string, CompiledAccessRight>>();
  for (const part of parts) {
    for (const api of part.apis) {
      for (const [id, policy] of Object.entries(part.policies)) {
        const right = policy.access_rights[api.api_id];
        if (right === undefined || merged.policies[id]!.access_rights[api.api_id] !== undefined) continue;
        const rights = missing.get(id) ?? {};
        rights[api.api_id] = right;
        missing.set(id, rights);
      }
    }
  }
  for (const [id, rights] of missing) {
    const policy = merged.policies[id]!;
    merged.policies[id] = { ...policy, access_rights: { ...policy.access_rights, ...rights } };
  }
  return merged;
}
