import type { ResourceRef } from '../compiled.ts';

/**
 * Why a resource (or part of it) could not be compiled. `reason` is a CamelCase
 * Kubernetes condition reason; the operator copies it into the resource's Ready condition.
 */
export const problemReasons = {
  /** The spec does not match the schema (a resource that bypassed the CRD, or a folder file). */
  InvalidSpec: 'InvalidSpec',
  /** The spec has a field its kind does not define, most often a misspelt one (folder files: kubectl apply refuses them). */
  UnknownField: 'UnknownField',
  InvalidRegex: 'InvalidRegex',
  /** An OAS path that is no path template: it must start with "/", and "{" "}" only enclose a placeholder name. */
  InvalidPath: 'InvalidPath',
  /** Two ApiDefinitions claim one api_id; the older one (then the first by namespace/name) keeps it. */
  DuplicateApiId: 'DuplicateApiId',
  /** A policy grants an api_id no ApiDefinition has. */
  MissingApi: 'MissingApi',
  /** OAS middleware names an operationId the document does not define. */
  UnknownOperation: 'UnknownOperation',
  /** Two OAS operations share one operationId. */
  DuplicateOperation: 'DuplicateOperation',
  /** proxy.rate_limit names a label no rate_limit_resources entry has. */
  UnknownRateLimitResource: 'UnknownRateLimitResource',
  /** docs/behaviour.md#authentication: an ignored (no-auth) endpoint cannot carry a key-level per-endpoint limit. */
  IgnoredEndpointWithKeyLimit: 'IgnoredEndpointWithKeyLimit',
  /** A rate_limit_pattern with text that looks like a reference and is none: every key of the Policy would count as one. */
  InvalidRateLimitPattern: 'InvalidRateLimitPattern',
} as const;

export type ProblemReason = keyof typeof problemReasons;

/**
 * Problems that leave a whole Policy out of the compiled config rather than only the part
 * they are in: an endpoint limit left out would let its keys through at the API's limit, so a
 * typo in an edit would loosen what is in force. Callers keep the policy's last good version
 * instead (docs/behaviour.md#bad-edits). A grant of a missing API, or a key-level limit on a
 * no-auth endpoint, loosens nothing, and only that part is left out.
 */
export const policyRefusingReasons: ReadonlySet<ProblemReason> = new Set(['InvalidSpec', 'UnknownField', 'InvalidRegex']);

export interface CompileProblem {
  ref: ResourceRef;
  /** Path of the offending field, e.g. `spec.extended_paths.rate_limit[2].path`. */
  field: string;
  reason: ProblemReason;
  message: string;
}
