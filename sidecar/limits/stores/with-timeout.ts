import { StoreTimeoutError } from '../errors.ts';

/** Bounds a store call by `redis_timeout_ms` whatever the client's own options are. */
export function withTimeout<T>(promise: Promise<T>, timeoutMs: number, timedOut: () => Error = () => new StoreTimeoutError(timeoutMs)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timedOut()), timeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
