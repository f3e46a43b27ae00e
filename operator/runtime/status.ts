import { CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { sameData } from '../../common/same-data.ts';
import { group, kinds, version, type KindName } from '../../crds/kinds.ts';
import type { OwnWrites } from '../kit/own-writes.ts';
import type { Condition } from '../../crds/schemas/common.ts';
import type { GwObject, GwStatus } from './gw-object.ts';

/** The fields every kind's status starts with. */
interface StatusBase {
  observedGeneration?: number | undefined;
  conditions?: Condition[] | undefined;
}

/** A kind's own status fields: what a controller decides, beside the generation and conditions. */
export type StatusFields<S> = Omit<S, keyof StatusBase>;

/** The Ready condition and kind-specific fields a controller wants on a resource. */
export interface DesiredStatus<S> {
  ready: boolean;
  reason: string;
  message: string;
  fields: StatusFields<S>;
}

/** A whole status to merge-patch: the kind's fields, the generation seen and the Ready condition. */
export type StatusPatch<S> = StatusFields<S> & { observedGeneration: number | undefined; conditions: Condition[] };

/** An object's Ready condition, as the last reconcile of its controller wrote it; none before the first. */
export const readyCondition = (obj: { status?: StatusBase | undefined }): Condition | undefined => obj.status?.conditions?.find((c) => c.type === 'Ready');

/**
 * Builds the status to write: `observedGeneration`, the Ready condition (its
 * lastTransitionTime kept unless its status flips) and the kind's fields. Returns null
 * when the resource already carries exactly that, so an unchanged reconcile writes
 * nothing (and triggers no watch event, no loop).
 */
export function nextStatus<S extends StatusBase>(
  obj: { metadata: { generation?: number | undefined }; status?: S | undefined },
  desired: DesiredStatus<S>,
  now = new Date(),
): StatusPatch<S> | null {
  const generation = obj.metadata.generation;
  const previous = readyCondition(obj);
  const status: Condition['status'] = desired.ready ? 'True' : 'False';
  const condition: Condition = {
    type: 'Ready',
    status,
    reason: desired.reason,
    message: desired.message,
    observedGeneration: generation,
    lastTransitionTime: previous?.status === status && previous.lastTransitionTime ? previous.lastTransitionTime : now.toISOString(),
  };
  const next: StatusPatch<S> = { ...desired.fields, observedGeneration: generation, conditions: [condition] };
  const stored = new Map(Object.entries(obj.status ?? {}));
  const unchanged = Object.entries(next).every(([key, value]) => sameData(stored.get(key), value));
  return unchanged ? null : next;
}

/** Writes a resource's status subresource. */
export interface StatusWriter {
  write<K extends KindName>(kind: K, obj: GwObject<K>, status: StatusPatch<GwStatus<K>>): Promise<void>;
}

export class KubeStatusWriter implements StatusWriter {
  readonly #api: CustomObjectsApi;
  readonly #ownWrites: OwnWrites;

  constructor(kc: KubeConfig, ownWrites: OwnWrites) {
    this.#api = kc.makeApiClient(CustomObjectsApi);
    this.#ownWrites = ownWrites;
  }

  /**
   * Merge-patches the status subresource. The patch is the whole status (nextStatus), so a
   * field it leaves undefined is sent as null, which removes it: a merge patch without it
   * would keep the value it had (a Key's secretName after it was given a key_hash).
   */
  async write<K extends KindName>(kind: K, obj: GwObject<K>, status: StatusPatch<GwStatus<K>>): Promise<void> {
    const whole = Object.fromEntries(Object.entries(status).map(([field, value]) => [field, value ?? null]));
    const written: GwObject<K> = await this.#api.patchNamespacedCustomObjectStatus(
      {
        group,
        version,
        plural: kinds[kind].plural,
        namespace: obj.metadata.namespace,
        name: obj.metadata.name,
        body: { status: whole },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    this.#ownWrites.record(kind, written);
  }
}
