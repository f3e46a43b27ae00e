/** A resource whose status may carry Kubernetes conditions. */
export interface WithConditions {
  status?: { conditions?: Array<{ type: string; status: string }> };
}

/** Whether the resource's Ready condition is True, as `kubectl wait --for=condition=Ready` reads it. */
export const isReady = (resource: WithConditions): boolean => resource.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
