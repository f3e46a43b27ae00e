import type { CompiledConfig } from '../../crds/compiled.ts';

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
  /** Configs refused since their last good version (each API keeps serving that one). */
  problems(): ConfigProblem[];
}

export interface ConfigProblem {
  /** What was refused: `api <api_id>` (a compiled ConfigMap) or `<Kind> <namespace>/<name>` (a resource). */
  subject: string;
  reason: string;
}

/** Per-API configs (one ConfigMap each) merged into the one config a sidecar runs. */
export function mergeConfigs(parts: readonly CompiledConfig[], fallbackSettings: CompiledConfig['settings']): CompiledConfig {
  const merged: CompiledConfig = {
    version: 1,
    settings: parts[0]?.settings ?? fallbackSettings,
    apis: [],
    policies: {},
  };
  for (const part of parts) {
    merged.apis.push(...part.apis);
    Object.assign(merged.policies, part.policies);
  }
  return merged;
}
