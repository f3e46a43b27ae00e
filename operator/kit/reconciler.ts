import { flatKey } from '../../common/flat-key.ts';

/** The object a reconcile is about: controllers are level-based, so its name is all they are told. */
export interface Request {
  namespace: string;
  name: string;
}

/** What a reconcile may ask of its queue beyond "done": to be looked at again after a delay. */
export interface Result {
  requeueAfterMs?: number;
}

/**
 * One kind's reconcile: read the desired and current state, make them agree, and return.
 * A thrown error is retried with backoff, unless it is a TerminalError. The signal is
 * aborted when the reconcile has run past its time limit; its result is then ignored.
 */
export interface Reconciler {
  reconcile(request: Request, signal: AbortSignal): Promise<Result | void>;
}

/**
 * A failure that retrying cannot fix (the input itself is wrong): it is logged and
 * counted, and the object waits for its next change or the periodic resync.
 */
export class TerminalError extends Error {
  override readonly name = 'TerminalError';
}

/**
 * A write refused because this process cannot tell that it still leads: it stalled past its
 * renew deadline (operator/runtime/leader-election.ts#holdsLease), and another may lead now.
 * Not a failure of the object: it waits until a renewal says whether this process leads.
 */
export class LeaseLapsedError extends Error {
  override readonly name = 'LeaseLapsedError';
}

export const requestKey = (request: Request): string => flatKey(request.namespace, request.name);

export function requestOf(key: string): Request {
  const slash = key.indexOf('/');
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
