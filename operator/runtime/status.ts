import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { group, version } from '../../crds/kinds.ts';
import type { GwObject } from './gw-object.ts';

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime?: string;
}

/** The Ready condition and kind-specific fields a controller wants on a resource. */
export interface DesiredStatus {
  ready: boolean;
  reason: string;
  message: string;
  fields: Record<string, unknown>;
}

/**
 * Builds the status to write: `observedGeneration`, the Ready condition (its
 * lastTransitionTime kept unless its status flips) and the kind's fields. Returns null
 * when the resource already carries exactly that, so an unchanged reconcile writes
 * nothing (and triggers no watch event, no loop).
 */
export function nextStatus(obj: GwObject, desired: DesiredStatus, now = new Date()): Record<string, unknown> | null {
  const current = (obj.status ?? {}) as Record<string, unknown>;
  const generation = obj.metadata?.generation;
  const previous = ((current.conditions as Condition[] | undefined) ?? []).find((c) => c.type === 'Ready');
  const status: Condition['status'] = desired.ready ? 'True' : 'False';
  const condition: Condition = {
    type: 'Ready',
    status,
    reason: desired.reason,
    message: desired.message,
    observedGeneration: generation,
    lastTransitionTime: previous?.status === status && previous.lastTransitionTime ? previous.lastTransitionTime : now.toISOString(),
  };
  const next: Record<string, unknown> = { ...desired.fields, observedGeneration: generation, conditions: [condition] };
  const unchanged = Object.entries(next).every(([key, value]) => JSON.stringify(current[key]) === JSON.stringify(value));
  return unchanged ? null : next;
}

export class StatusWriter {
  readonly #api: CustomObjectsApi;

  constructor(kc: KubeConfig) {
    this.#api = kc.makeApiClient(CustomObjectsApi);
  }

  /** Merge-patches the status subresource; fields set to null in `status` are removed. */
  async write(plural: string, obj: GwObject, status: Record<string, unknown>): Promise<void> {
    await this.#api.patchNamespacedCustomObjectStatus(
      {
        group,
        version,
        plural,
        namespace: obj.metadata.namespace,
        name: obj.metadata.name,
        body: { status },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  }
}
