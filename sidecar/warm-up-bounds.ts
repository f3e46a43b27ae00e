/** Requests a gateway sends through its warm-up unless told otherwise (sidecar/warm-up.ts; the figure is measured in docs/architecture.md#warm-up). */
export const WARM_UP_DEFAULT_REQUESTS = 8000;

/** How long a warm-up may hold readiness back, whatever its request count: a pod held to a small CPU limit turns ready after this. */
export const WARM_UP_DEADLINE_MS = 10_000;
