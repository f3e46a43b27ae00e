import { Observable, type ConfigurationOptions, type RequestContext, type ResponseContext } from '@kubernetes/client-node';

/**
 * How long an admin operation waits on the API server before it answers its failure
 * (README.md#admin-operations): a stalled API server would otherwise hold each request, and
 * every retry of it, for as long as it stalls.
 */
export const ADMIN_DEADLINE_MS = 10_000;

/**
 * Options for the API calls of one operation: each is aborted once `ms` have passed since this
 * was made, so its calls share one bound. An aborted write may still have been carried out.
 */
export function deadline(ms: number): ConfigurationOptions {
  const signal = AbortSignal.timeout(ms);
  const bounded = {
    pre: (context: RequestContext) => {
      context.setSignal(signal);
      return new Observable(Promise.resolve(context));
    },
    post: (response: ResponseContext) => new Observable(Promise.resolve(response)),
  };
  return { middleware: [bounded], middlewareMergeStrategy: 'append' };
}
