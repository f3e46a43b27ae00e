/**
 * What a request-path step returns: the value when it has it, a promise only when it must wait
 * (a store read, a throttle). A request that waits for nothing then takes no promise
 * (docs/architecture.md#performance).
 */
export type MaybePromise<T> = T | Promise<T>;

/** `next` of `value`: at once for a value, once it resolves for a promise. */
export function andThen<T, R>(value: MaybePromise<T>, next: (value: T) => MaybePromise<R>): MaybePromise<R> {
  return value instanceof Promise ? value.then(next) : next(value);
}
